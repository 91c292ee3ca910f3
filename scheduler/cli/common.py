"""What the commands share: the --config and --output options, the consoles, JSON printing,
money and time formats, opening the daemon's database, the one place that prints the
stale-daemon warning, and how a failure a person can act on is printed.

Every command module imports this one, and nothing `spotwise --help` runs does. Rich,
SQLAlchemy and the read models are imported inside the functions that use them: a command
that prints plain text to a pipe pays for none of them.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from sqlalchemy.engine import Engine

    from scheduler.core.config import Config
    from scheduler.state.read_connection import Database


class Output(StrEnum):
    table = "table"
    wide = "wide"  # every column (status), as kubectl's -o wide
    json = "json"


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Config file (else $SPOTWISE_CONFIG, ...)")
]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json")]

# A job's state in colour, in `status` and `show`.
STATE_STYLE = {
    "RUNNING": "green",
    "SUCCEEDED": "bold green",
    "FAILED": "red",
    "HELD": "yellow",
    "RECOVERING": "magenta",
    "CANCELLED": "dim",
}


def out_console() -> Console:
    """Standard output as Rich prints it; piped or captured, wide enough that tables do not
    fold. A command takes one when it starts (the environment it runs in decides)."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        return Console(width=200)
    return console


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def stdout_is_terminal() -> bool:
    """Whether Rich takes standard output for a terminal, without importing Rich where it
    plainly is not one (not a tty, and neither variable that makes Rich say otherwise)."""
    if not sys.stdout.isatty() and not ({"TTY_COMPATIBLE", "FORCE_COLOR"} & set(os.environ)):
        return False
    return out_console().is_terminal


def terminal_width() -> int | None:
    """$COLUMNS when set, the terminal's width on a terminal, else None (no limit)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return out_console().width if stdout_is_terminal() else None


def print_err(text: str, *, soft_wrap: bool = False) -> None:
    """A line of plain text (never markup) on stderr, as Rich prints it: folded at the
    console's width unless `soft_wrap`. Written directly where Rich would write it unchanged
    (printable ASCII that fits the width Rich would take); Rich is imported otherwise."""
    width = _plain_width()
    if text.isascii() and text.isprintable() and (soft_wrap or (width and len(text) <= width)):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        return
    err_console().print(text, markup=False, highlight=False, soft_wrap=soft_wrap)


def _plain_width() -> int | None:
    """The width Rich's stderr console takes where it can be known without Rich: $COLUMNS,
    or 80 when no standard stream is a terminal; None otherwise."""
    env = os.environ.get("COLUMNS")
    if env is not None and env.isdigit():
        return int(env)
    if any(os.isatty(fd) for fd in (0, 1, 2)):
        return None
    return 80


def print_out(text: str, *, soft_wrap: bool = False, console: Console | None = None) -> None:
    """A line of plain text (never markup) on stdout, through Rich."""
    (console or out_console()).print(text, markup=False, highlight=False, soft_wrap=soft_wrap)


def print_json(doc: Any) -> None:
    import json

    from scheduler.state.read_models import json_default

    sys.stdout.write(json.dumps(doc, indent=2, default=json_default) + "\n")


def money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


def ago(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def when(ts: datetime | None) -> str:
    """A date, a time and a zone (the viewer's local zone; UTC on most servers)."""
    return ts.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if ts else "-"


def open_reads(config: Path | None) -> tuple[Config, Database]:
    """The daemon's database as the daemon finds it (same config, same state_dir), for the
    commands that only read jobs and events: SQLite through sqlite3, else an engine."""
    from scheduler.state.files import load_config
    from scheduler.state.read_connection import open_for_reading, sqlite_file

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    if sqlite_file(url) is None:
        remember_database_urls()
    else:
        _last_database_url[:] = [url]
    return cfg, open_for_reading(url)


def open_engine(config: Path | None) -> tuple[Config, Engine]:
    """The daemon's database as an engine, for the commands that write or read the tables."""
    from scheduler.state.db import open_existing
    from scheduler.state.files import load_config

    cfg = load_config(config)
    remember_database_urls()
    return cfg, open_existing(cfg.daemon.resolved_database_url())


def daemon_warning(cfg: Config, lease: dict[str, Any] | None) -> str | None:
    """A line to print when no daemon is keeping this database (else None), from its
    heartbeat `lease` (read_models.daemon_heartbeat; None: there is none). Lines for a daemon
    that should be running but is silent start with 'daemon not seen'."""
    if lease is None:
        return "no spotwise daemon has run on this database yet: start one (spotwise daemon)"
    age = (datetime.now(UTC) - lease["renewed_at"]).total_seconds()
    stale = max(60.0, 6 * cfg.daemon.reconcile_interval.total_seconds() / _speed(cfg))
    if lease["status"] == "stopped":
        return f"the spotwise daemon stopped {ago(age)} ago: start it (spotwise daemon)"
    if age > stale:
        return f"daemon not seen for {ago(age)} (pid {lease['pid']} on {lease['host']})"
    return None


def print_daemon_warning(warning: str | None) -> None:
    """The stale-daemon warning, on stderr (every command that prints it prints it here)."""
    if warning:
        print_err(f"warning: {warning}")


def warn_if_no_daemon(cfg: Config, db: Database) -> None:
    """After a change to the desired state: say so when no daemon will act on it."""
    from scheduler.state.read_models import daemon_heartbeat

    print_daemon_warning(daemon_warning(cfg, daemon_heartbeat(db)))


def _speed(cfg: Config) -> float:
    local = cfg.providers.local
    if local is None or cfg.providers.aws is not None:
        return 1.0
    return float(local.speedup)


def exit_on_known_error(e: Exception) -> None:
    """Exit with one `error:` line per problem when `e` is a failure a person can act on (a
    UserError, a database that cannot be used, a path the configuration names that cannot
    be created or read); return for anything else."""
    import sqlite3

    errors = sys.modules.get("scheduler.core.errors")  # loaded by whatever raised one
    if errors is not None and isinstance(e, errors.UserError):
        _print_error(str(e), e.exit_code)
    if isinstance(e, OSError) and e.filename is not None:
        # A configured directory or file the command cannot use: the user's to fix.
        _print_error(f"{e.filename}: {e.strerror or e}", 2)
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    database_errors: tuple[type[BaseException], ...] = (sqlite3.DatabaseError,)
    if sqlalchemy_exc is not None:
        database_errors += (sqlalchemy_exc.DatabaseError,)
    if isinstance(e, database_errors):
        from scheduler.core.errors import UserError

        _print_error(_database_problem(e), UserError.exit_code)


def _print_error(text: str, exit_code: int) -> None:
    """Each problem on its own 'error: ' line, as plain text (no Rich markup), passwords masked."""
    from scheduler.core.errors import mask_urls

    red = sys.stderr.isatty()
    for line in mask_urls(str(text)).splitlines() or [""]:
        prefix = "\x1b[31merror:\x1b[0m" if red else "error:"
        sys.stderr.write(f"{prefix} {line}\n")
    sys.stderr.flush()
    sys.exit(exit_code)


_last_database_url: list[str] = []  # the URL of the database most recently connected to


def remember_database_urls() -> None:
    """Note each engine's URL as it connects, so a database error can say which database
    (every command that builds an engine calls this first; registered once)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if event.contains(Engine, "handle_error", _note_url):
        return
    event.listen(Engine, "handle_error", _note_url)


def _note_url(ctx: Any) -> None:
    if ctx.engine is not None:  # also set for errors while connecting
        _last_database_url[:] = [ctx.engine.url.render_as_string(hide_password=True)]


def _database_problem(e: Exception) -> str:
    where = _last_database_url[0] if _last_database_url else "the configured database_url"
    detail = str(getattr(e, "orig", None) or e).splitlines()[0] if str(e) else type(e).__name__
    text = detail.lower()
    if "not a database" in text or "malformed" in text or "no such table" in text:
        return f"the database at {where} is not a spotwise database or is corrupted: {detail}"
    return f"the database at {where} cannot be used: {detail}"
