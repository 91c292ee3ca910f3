"""The root command group: every command listed from one table, its module imported when it runs.

`spotwise --help` lists the commands and their one-line help from the table in `app.py` and
costs no more than starting Python and Typer; a command's module, and all it imports, is
loaded only when that command runs or its own help is asked for (click's "lazy group":
`list_commands`, `get_command` and `format_commands` read the table). The root's help is
click's plain text: Typer's Rich help imports more than the rest of `spotwise --help`
together. Each command's own help and every usage error stay Typer's (Rich).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Protocol

import typer
from typer.core import TyperCommand, TyperGroup


class Entry(Protocol):
    """A row of the command table (app.Command)."""

    name: str
    module: str
    help: str
    optional: bool


# Each module's commands, built once per process (the tests invoke the app many times).
_groups: dict[str, Any] = {}

# Set by app.run (a command in a process of its own): once the command's module is loaded,
# everything alive is start-up state (modules, classes, the Typer application) that lives
# until exit, and is frozen (gc.freeze): neither the command's collections nor the one at
# exit walk it again, about 15 ms of a 120 ms `status`. None of it holds a file, connection
# or process that only a collection closes: those come later, from the command, and are
# collected as before. Not in the tests' process, which must keep collecting everything.
freeze_start_up = False


def load(entry: Entry) -> Any:
    """The click command `entry` names (None when an optional module is missing)."""
    group = _groups.get(entry.module)
    if group is None:
        try:
            module = importlib.import_module(entry.module)
        except ImportError:
            if entry.optional:
                return None
            raise
        group = _groups[entry.module] = typer.main.get_group(module.commands)
        for command in group.commands.values():
            plain_flags(command)
        if freeze_start_up:
            gc.freeze()
    return group.commands[entry.name]


def plain_flags(command: Any) -> None:
    """A flag's help says what it does, not '<bool>': Typer's Rich help shows a type for
    every option, flags (and --help) included. Subcommands of a group too."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    original = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = original(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
    for sub in (getattr(command, "commands", None) or {}).values():
        plain_flags(sub)


class LazyCommands(MutableMapping[str, Any]):
    """A group's `commands`: every name of the table, each loaded on first lookup."""

    def __init__(self, table: tuple[Entry, ...]) -> None:
        self._table = {c.name: c for c in table}
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            command = load(self._table[name])
            if command is None:
                raise KeyError(name)
            self._loaded[name] = command
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._table.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._table or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from self._table
        yield from (n for n in self._loaded if n not in self._table)

    def __len__(self) -> int:
        return len(set(self._table) | set(self._loaded))


class CommandTable(TyperGroup):
    """A Typer group whose commands are `table`'s (set by a subclass)."""

    table: tuple[Entry, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.table)

    # Click's types, untyped here: Typer has vendored Click in some versions, not in others.
    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Any, name: str) -> Any:
        return self.commands.get(name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(TyperGroup, self).format_help(ctx, formatter)  # click's plain help, not Rich's

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands and their one-line help, from the table (no module is imported)."""
        rows = [(c.name, TyperCommand(name=c.name, help=c.help)) for c in self.table]
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])


def root_app(table: tuple[Entry, ...], help: str, version_line: Callable[[], str]) -> typer.Typer:
    """The `spotwise` Typer application over `table`, with `--version` and completion."""

    class Root(CommandTable):
        pass

    Root.table = table

    def print_version(value: bool) -> None:
        if value:
            sys.stdout.write(version_line())
            raise typer.Exit()

    app = typer.Typer(
        name="spotwise",
        help=help,
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
        pretty_exceptions_enable=False,
        cls=Root,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False,
            "--version",
            callback=print_version,
            is_eager=True,
            help="Print the version and exit",
        ),
    ) -> None:
        pass

    return app
