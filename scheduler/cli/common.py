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

# The stale-daemon warning and its ages: the same words from the API server.
from scheduler.state.liveness import ago, daemon_warning  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from rich.console import Console
    from sqlalchemy.engine import Engine

    from scheduler.core.config import Config
    from scheduler.core.read_settings import ReadSettings
    from scheduler.state.read_connection import Database


class Output(StrEnum):
    table = "table"
    wide = "wide"  # every column, past the terminal's edge if need be, as kubectl's -o wide
    json = "json"


class Format(StrEnum):
    """-o for the commands where `wide` would mean nothing (one record, or every column
    already)."""

    table = "table"
    json = "json"


CONFIG_HELP = "Config file (else $SPOTWISE_CONFIG, ./spotwise.toml, /etc/spotwise/spotwise.toml)"
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", metavar="FILE", help=CONFIG_HELP)]
OutputOpt = Annotated[Format, typer.Option("--output", "-o", help="table or json")]
WideOutputOpt = Annotated[
    Output,
    typer.Option("--output", "-o", help="table, wide (every column, whole) or json"),
]

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


class StdoutLines:
    """Lines of plain text on stdout as Rich prints them, Rich imported only where it would
    change something: a terminal (colours, its width), or a line it would fold or escape.
    Piped, a command that prints a page of short lines (`show`) pays nothing for Rich."""

    def __init__(self) -> None:
        self.terminal = stdout_is_terminal()
        # out_console's width off a terminal (the only place it is used): $COLUMNS, else
        # wide enough not to fold.
        self.width = 0 if self.terminal else terminal_width() or 200
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = out_console()
        return self._console

    def print(self, text: str, *, soft_wrap: bool = False, style: str | None = None) -> None:
        """`text` (never markup) in `style` where styles show, folded at the width unless
        `soft_wrap`."""
        if not self.terminal and text.isascii() and text.isprintable():
            lines = [text] if soft_wrap or len(text) <= self.width else fold(text, self.width)
            if lines is not None:
                sys.stdout.write("\n".join(lines) + "\n")
                return
        self.console.print(text, markup=False, highlight=False, soft_wrap=soft_wrap, style=style)


def fold(text: str, width: int) -> list[str] | None:
    """`text` folded at `width` as Rich folds it (greedy, at spaces; a line keeps the space
    after its last word when that still fits), for words parted by single spaces that each
    fit; None for anything else (Rich then does it)."""
    words = text.split(" ")
    if "" in words or any(len(w) > width for w in words):
        return None
    out: list[str] = []
    line = words[0]
    for word in words[1:]:
        if len(line) + 1 + len(word) <= width:
            line = f"{line} {word}"
        else:
            out.append(line + " " if len(line) < width else line)
            line = word
    out.append(line)
    return out


def print_json(doc: Any) -> None:
    import json

    from scheduler.state.read_models import json_default

    sys.stdout.write(json.dumps(doc, indent=2, default=json_default) + "\n")


def money(x: float | None) -> str:
    """'$1,234.50'; '-$0.40' for a refund; never '-$0.00' (a hair below zero is zero)."""
    if x is None:
        return "-"
    cents = round(x, 2)
    return f"-${-cents:,.2f}" if cents < 0 else f"${cents + 0.0:,.2f}"


def when(ts: datetime | None) -> str:
    """A date, a time and a zone (the viewer's local zone; UTC on most servers)."""
    return ts.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if ts else "-"


def stamp(ts: datetime | None) -> str:
    """A table's time: 'MM-DD HH:MM:SS' in the viewer's zone (the header names the zone)."""
    return ts.astimezone().strftime("%m-%d %H:%M:%S") if ts else "-"


def zone_name() -> str:
    """The viewer's time zone, as the times on screen are in it."""
    return datetime.now(UTC).astimezone().strftime("%Z") or "local"


class ScreenClock:
    """One clock on screen. The database holds the daemon's clock, which on a sped-up local
    market runs ahead of the wall clock (a ScaledClock: market = anchor + (wall - anchor) x
    speedup); the trainer's own log lines and the viewer's watch are wall-clock. Every time
    and age a command prints goes through `wall`, so `status`, `show`, `events` and `logs`
    agree; money stays in market hours (that is what the market charged)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.speedup = float(getattr(clock, "speedup", 1.0) or 1.0)
        self.anchor: datetime | None = getattr(clock, "anchor", None)

    @property
    def scaled(self) -> bool:
        return self.anchor is not None and self.speedup != 1.0

    def daemon_now(self) -> datetime:
        """Now on the daemon's clock (what a stored time is compared with)."""
        return self.clock.now()  # type: ignore[no-any-return]

    def wall(self, t: datetime | None) -> datetime | None:
        """A stored time (the daemon's clock) as the wall-clock moment it happened."""
        if t is None or not self.scaled or self.anchor is None:
            return t
        return self.anchor + (t - self.anchor) / self.speedup

    def daemon_time(self, wall: datetime) -> datetime:
        """The daemon's clock at a wall-clock moment (the inverse of `wall`)."""
        if not self.scaled or self.anchor is None:
            return wall
        return self.anchor + (wall - self.anchor) * self.speedup

    def note(self) -> str:
        """Said once where times are printed on a sped-up market, else ''."""
        if not self.scaled:
            return ""
        return (
            f"local market at {self.speedup:g}x: times are wall-clock; costs accrue in market hours"
        )


def screen_clock(settings: ReadSettings) -> ScreenClock:
    from scheduler.state.market_clock import read_only_clock

    return ScreenClock(read_only_clock(settings))


def where(provider: str | None, cloud: str | None, region: str | None, zone: str | None) -> str:
    """Where an attempt runs, for a table: 'aws/us-east-1a' (a zone that names its region
    stands for both), 'local:aws/us-east-1a' on the local market, '-' when nowhere."""
    if not cloud:
        return "-"
    place = (
        zone
        if zone and region and zone.startswith(region)
        else "/".join(x for x in (region, zone) if x)
    )
    text = "/".join(x for x in (cloud, place) if x)
    return f"local:{text}" if provider == "local" else text


def pool_label(provider: str | None, pool: str) -> str:
    """A pool as people read it: the local market's say so ('local:aws/us-east-1a/...'),
    since they carry the real clouds' names."""
    return (
        f"local:{pool}" if provider == "local" and pool and not pool.startswith("local:") else pool
    )


def open_reads(config: Path | None, *, warn: bool = False) -> tuple[ReadSettings, Database]:
    """The daemon's database as the daemon finds it (same config, same state_dir), for the
    commands that only read jobs and events: SQLite through sqlite3, else an engine.
    The settings returned are those of the config the daemon runs with when it recorded one
    (see `daemon_config`), else of this command's own. When the daemon vouches for the
    file (it validated these very bytes: state.vouched_config), it is not validated again."""
    from scheduler.core.read_settings import ReadSettings
    from scheduler.state.files import load_config
    from scheduler.state.read_connection import open_for_reading, sqlite_file

    fast = _vouched_reads(config)
    if fast is not None:
        return fast
    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    if sqlite_file(url) is None:
        remember_database_urls()
    else:
        _last_database_url[:] = [url]
    db = open_for_reading(url)
    return ReadSettings.of_config(daemon_config(cfg, db, config, warn=warn)), db


def _vouched_reads(config: Path | None) -> tuple[ReadSettings, Database] | None:
    """`open_reads` without validating the config, when the daemon's record vouches for it;
    None to take the validating path (which reports whatever is wrong)."""
    import sqlite3

    from scheduler.core.errors import UserError
    from scheduler.state.read_connection import open_for_reading
    from scheduler.state.read_models import running_config_text
    from scheduler.state.vouched_config import config_text, sqlite_database, vouched

    source = config_text(config)
    if source is None:
        return None
    found, text = source
    db_file = sqlite_database(text)
    if db_file is None or not db_file.is_file():
        return None
    url = f"sqlite:///{db_file}"
    try:
        db = open_for_reading(url)
        settings = vouched(running_config_text(db), found, text)
    except (UserError, sqlite3.Error, OSError):
        return None
    if settings is None:
        return None
    _last_database_url[:] = [url]
    return settings, db


def open_engine(config: Path | None, *, warn: bool = False) -> tuple[Config, Engine]:
    """The daemon's database as an engine, for the commands that write or read the tables;
    the config as `open_reads` gives it."""
    from scheduler.state.db import open_existing
    from scheduler.state.files import load_config

    cfg = load_config(config)
    remember_database_urls()
    engine = open_existing(cfg.daemon.resolved_database_url())
    return daemon_config(cfg, engine, config, warn=warn), engine


def daemon_config(
    cfg: Config, db: Database, given: Path | None = None, *, warn: bool = False
) -> Config:
    """The configuration the daemon keeping `db` runs with (its budgets, teams, providers
    and market speed), as it recorded it beside its heartbeat; `cfg` (this command's own)
    when it recorded none or this spotwise cannot read it. With `warn`, one line on stderr
    when the two differ in what a person compares, saying which shows."""
    from scheduler.state.read_models import running_config_text
    from scheduler.state.running_config import differences, parse

    running = parse(running_config_text(db))
    if running is None:
        return cfg
    if warn:
        differ = differences(running.config, cfg)
        if differ:
            from scheduler.state.files import find_config

            own = find_config(given)
            what = ", ".join(differ)
            if own is not None and running.path == str(own.resolve()):
                text = (
                    f"warning: {own} changed since the daemon read it ({what} differ): "
                    "showing what it runs with; reload it to apply (systemctl reload spotwise)"
                )
            else:
                text = (
                    f"warning: showing the daemon's {what}: it runs with "
                    f"{running.path or 'built-in defaults'}, this command read "
                    f"{own or 'built-in defaults'}"
                )
            print_err(text, soft_wrap=True)
    return running.config


def print_daemon_warning(warning: str | None) -> None:
    """The stale-daemon warning, on stderr (every command that prints it prints it here)."""
    if warning:
        print_err(f"warning: {warning}")


def warn_if_no_daemon(cfg: Config, db: Database) -> None:
    """After a change to the desired state: say so when no daemon will act on it."""
    from scheduler.core.read_settings import ReadSettings
    from scheduler.state.read_models import daemon_heartbeat

    print_daemon_warning(daemon_warning(ReadSettings.of_config(cfg), daemon_heartbeat(db)))


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


def unix_user() -> str:
    """Who is asking, for the audit log: the login user behind sudo (`sudo spotwise cancel`
    and `sudo -u spotwise spotwise cancel` are the person who typed it), else the user this
    process runs as."""
    import pwd

    sudo = os.environ.get("SUDO_USER")
    if sudo and os.environ.get("SUDO_UID"):
        return sudo
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def complete_jobs(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Typer's completion of a job argument (the TABs completion.answer does not take)."""
    from scheduler.cli.completion import job_completions

    given = None
    node: typer.Context | None = ctx
    while node is not None and given is None:
        given = (node.params or {}).get("config")
        node = node.parent  # type: ignore[assignment]
    return job_completions(given, incomplete)
