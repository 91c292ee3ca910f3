"""The `spotwise` command line: the table of every command and the module that holds it.

One list a reader takes in at a glance, as a daemon's list of controllers. Each module holds
one group of commands and imports what they use; `lazy_group` builds the Typer application
from this table and imports a command's module only when that command runs or its help is
asked for. `app` (the Typer application the tests invoke) is built on first use, so that
`spotwise --version` is answered before Typer is imported.
"""

from __future__ import annotations

import os
import sys
from typing import Any


class Command:
    """One command: its name, the module of scheduler/cli whose `commands` (a Typer)
    registers it, and its one-line help, the first paragraph of its docstring (a test
    compares the two).
    `optional`: absent rather than an error when its module cannot be imported (the
    benchmarks, in an install trimmed of the lab)."""

    __slots__ = ("help", "module", "name", "optional")

    def __init__(self, name: str, module: str, help: str, optional: bool = False) -> None:
        self.name, self.help, self.optional = name, help, optional
        self.module = f"scheduler.cli.{module}"


HELP = "Cost-aware Spot GPU scheduler: live prices, budgets, interruption-safe jobs."

# In the order `spotwise --help` lists them.
COMMANDS = (
    Command("daemon", "daemon", "Run the daemon in the foreground (what systemd starts)."),
    Command("submit", "desired", "Validate and enqueue a job; prints its id."),
    Command(
        "status", "status", "One row per job, active and newest first: what it is doing and why."
    ),
    Command(
        "show", "show", "One job: what it asked for, attempts and why each ended, events, cost."
    ),
    Command(
        "logs",
        "logs",
        "A job's stdout and stderr (the local market's files; for clouds, where they are).",
    ),
    Command(
        "cancel",
        "desired",
        "Cancel a job, or every unfinished job of a team (instances checkpoint and stop).",
    ),
    Command(
        "release",
        "desired",
        "Put a HELD job back in the queue (a budget that still binds holds it again).",
    ),
    Command("requeue", "desired", "Run a FAILED job again, with its failure counters reset."),
    Command("prices", "prices", "Current offerings from the daemon's providers, cheapest first."),
    Command(
        "budget",
        "spend",
        "Each budget the daemon enforces: limit, window, spent, projected, state.",
    ),
    Command(
        "cost",
        "spend",
        "What was spent, by team, job, cloud or day (the hourly spend budgets use).",
    ),
    Command(
        "report",
        "spend",
        "Spend against the cheapest adequate on-demand, savings, interruptions, GPU-hours.",
    ),
    Command("events", "show", "The audit log: what the daemon decided and why, and who asked."),
    Command(
        "check-config", "admin", "Validate a config file; exit 2 with one message per problem."
    ),
    Command("db", "admin", "The database: schema (Alembic migrations), current revision, backup."),
    Command("service", "admin", "Run the daemon as a systemd service."),
    Command(
        "server",
        "server",
        "The API server and dashboard for remote users (loopback unless told otherwise).",
    ),
    Command("user", "accounts", "Users of the API server: add, list, remove."),
    Command("token", "accounts", "API tokens: create (shown once), list, revoke."),
    Command(
        "login",
        "server",
        "Remember an API server and token for this user's commands (a 0600 file).",
    ),
    Command("logout", "server", "Forget the API server and token `spotwise login` remembered."),
    Command(
        "doctor",
        "doctor",
        "Check each configured cloud account and the checkpoint store before the first job.",
    ),
    Command(
        "demo", "demo", "The whole system on the local market, start to finish (a minute or two)."
    ),
    Command(
        "bench", "bench", "Benchmarks against baselines measured in the same run.", optional=True
    ),
)


def version_line() -> str:
    """'spotwise X.Y.Z (database schema NNNN)': the version from the installed
    distribution's metadata ('unknown' in a source tree never installed) and the schema this
    spotwise needs (a database at another one is upgraded by `spotwise db upgrade`)."""
    return f"{_version()} (database schema {schema_head()})\n"


def schema_head() -> str:
    """The newest migration's revision (scheduler.state.revisions: the standard library
    alone, so `--version` imports nothing heavy)."""
    from scheduler.state.revisions import head_revision

    try:
        return head_revision()
    except (OSError, RuntimeError):
        return "unknown"


def _version() -> str:
    from scheduler.state.installed import version

    return f"spotwise {version()}"


def __getattr__(name: str) -> Any:
    """`app`, the Typer application, built on first use (see the module's docstring)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from scheduler.cli.lazy_group import root_app

    built = globals()["app"] = root_app(COMMANDS, HELP, version_line)
    return built


def run() -> None:
    """The `spotwise` console script and `python -m scheduler`: `main`, in a process of
    its own, whose start-up is frozen once the command's module is loaded (see
    lazy_group.freeze_start_up)."""
    main(own_process=True)


def main(*, own_process: bool = False) -> None:
    """The command line: a failure a person can act on (a UserError, an unusable database,
    a configured path that cannot be used) is one `error:` line per problem and its exit
    code; anything else is a bug, and its traceback follows (the fuzz tests drive this
    function with unusable values and allow none). `own_process`: see `run`."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(version_line())
        return
    if "_SPOTWISE_COMPLETE" in os.environ:  # a shell's TAB: the common ones without Typer
        from scheduler.cli.completion import answer

        if answer():
            return
    try:
        app = __getattr__("app")
        if own_process:
            from scheduler.cli import lazy_group

            lazy_group.freeze_start_up = True
        app()
    except Exception as e:
        from scheduler.cli.common import exit_on_known_error

        exit_on_known_error(e)
        raise
