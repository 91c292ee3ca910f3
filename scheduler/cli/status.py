"""The `spotwise` command line (Typer + Rich). Every read command takes `-o json`."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from scheduler.core.errors import UserError
from scheduler.core.states import JobState
from scheduler.daemon.wiring import build_providers, clock_for
from scheduler.state import read_models
from scheduler.state.db import open_existing, redact_url
from scheduler.state.files import load_config, load_jobspec


def _bench_command(name: str) -> Any:
    """The `bench` group, built on first use: its modules import the whole daemon and the
    replay simulator, which no other command needs (they start ~0.5 s faster without)."""
    try:
        from scheduler.lab.bench import bench_app
        from scheduler.lab.bench_daemon import register
    except ImportError:  # the benchmark module is optional in trimmed installs
        return None
    if not any(c.name == "daemon" for c in bench_app.registered_commands):
        register(bench_app)
    command = typer.main.get_command(bench_app)
    command.name = name
    return command


class _RootGroup(TyperGroup):
    """spotwise's commands, with `bench` loaded only when it is asked for (or listed)."""

    # Click's types, untyped here: Typer has vendored Click in some versions, not in others.
    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), "bench"]

    def get_command(self, ctx: Any, name: str) -> Any:
        if name == "bench" and "bench" not in self.commands:
            return _bench_command(name)
        return super().get_command(ctx, name)


app = typer.Typer(
    name="spotwise",
    help="Cost-aware Spot GPU scheduler: live prices, budgets, interruption-safe jobs.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
    cls=_RootGroup,
)
out = Console()
if not out.is_terminal and not os.environ.get("COLUMNS"):
    out = Console(width=200)  # piped or captured: wide enough that tables do not fold
err = Console(stderr=True)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("spotwise")
    except Exception:  # running from a source tree that was never installed
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"spotwise {_version()}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Cost-aware Spot GPU scheduler: live prices, budgets, interruption-safe jobs."""


class Output(StrEnum):
    table = "table"
    wide = "wide"  # every column (status), as kubectl's -o wide
    json = "json"


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Config file (else $SPOTWISE_CONFIG, ...)")
]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json")]


def _engine(config: Path | None):
    """The daemon's database as the daemon finds it (same config, same state_dir)."""
    cfg = load_config(config)
    return cfg, open_existing(cfg.daemon.resolved_database_url())


def _heartbeat(engine):  # type: ignore[no-untyped-def]
    """The daemon's heartbeat row, read once per command: the warning and the lease line
    both come from it, so a daemon starting mid-command cannot be "absent" and listed."""
    from scheduler.state.lease import read_heartbeat

    return read_heartbeat(engine)


def _daemon_warning(cfg, hb: Any) -> str | None:  # type: ignore[no-untyped-def]
    """A line to print when no daemon is keeping this database (else None), from the
    heartbeat `hb` (None: there is none). Lines for a daemon that should be running but is
    silent start with 'daemon not seen'."""
    if hb is None:
        return "no spotwise daemon has run on this database yet: start one (spotwise daemon)"
    age = hb.age().total_seconds()
    stale = max(60.0, 6 * cfg.daemon.reconcile_interval.total_seconds() / _speed(cfg))
    if hb.status == "stopped":
        return f"the spotwise daemon stopped {_ago(age)} ago: start it (spotwise daemon)"
    if age > stale:
        return f"daemon not seen for {_ago(age)} (pid {hb.pid} on {hb.host})"
    return None


def _lease(hb: Any) -> dict[str, Any] | None:
    """Which daemon holds the lease (the heartbeat row on SQLite) and since when."""
    if hb is None:
        return None
    return {
        "holder": hb.holder,
        "pid": hb.pid,
        "host": hb.host,
        "epoch": hb.epoch,
        "since": hb.started_at,
        "renewed_at": hb.renewed_at,
        "status": hb.status,
    }


def _lease_line(lease: dict[str, Any] | None) -> str | None:
    if lease is None or lease["status"] == "stopped":
        return None
    since = lease["since"].astimezone(UTC)
    now = datetime.now(UTC)
    held = _ago((now - since).total_seconds())
    # the time of day alone when it is today's: the whole date made the line 81 columns
    when = f"{since:%H:%M:%S}Z" if since.date() == now.date() else f"{since:%Y-%m-%d %H:%M:%S}Z"
    return (
        f"daemon: pid {lease['pid']} on {lease['host']} holds the lease since {when} "
        f"({held}, epoch {lease['epoch']})"
    )


def _speed(cfg) -> float:  # type: ignore[no-untyped-def]
    local = cfg.providers.local
    if local is None or cfg.providers.aws is not None:
        return 1.0
    return float(local.speedup)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=read_models.json_default) + "\n")


def _money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


@app.command()
def daemon(
    config: ConfigOpt = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="DEBUG, INFO, WARNING or ERROR (else $SPOTWISE_LOG_LEVEL, log_level)"),
    ] = None,
) -> None:
    """Run the daemon in the foreground (what systemd starts)."""
    import signal

    # Until the daemon installs its own handlers, a SIGHUP must not end the process.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from scheduler.daemon.logs import configure, resolve_level
    from scheduler.daemon.process import Daemon

    cfg = load_config(config)
    configure(resolve_level(cfg.daemon.log_level, log_level))
    raise typer.Exit(Daemon(config).run())


@app.command()
def submit(
    job_file: Annotated[Path, typer.Argument(help="Job file (TOML)")],
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Validate and enqueue a job; prints its id."""
    from scheduler.core.config import check_team
    from scheduler.state.desired import submit as submit_job

    spec = load_jobspec(job_file)
    cfg = load_config(config)
    now = clock_for(cfg).now()
    # Everything that can never run is refused before the job is queued.
    spec.validate_for_submit(now, source=str(job_file))
    check_team(spec, cfg, source=str(job_file))
    engine = open_existing(cfg.daemon.resolved_database_url())
    job = submit_job(engine, spec, now, cfg.daemon.resolved_checkpoint_root())
    warning = _daemon_warning(cfg, _heartbeat(engine))
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    if output is Output.json:
        _print_json(read_models.document(id=job.id, name=job.name, state=job.state.value))
    else:
        out.print(job.id)


def _age(seconds: float) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


# Status columns in display order, each with its keep-priority (0 always kept; lower kept
# first when the terminal is narrow). REASON stays last so it can wrap or be cut.
_COLUMNS: tuple[tuple[str, int], ...] = (
    ("ID", 0),
    ("NAME", 0),
    ("STATE", 0),
    ("AGE", 0),
    ("TEAM", 8),
    ("WHERE", 3),
    ("INSTANCE", 6),
    ("MARKET", 7),
    ("$/H", 2),
    ("COST", 1),
    ("PROGRESS", 4),
    ("RECOV", 5),
    ("REASON", 0),
)
_RIGHT = {"$/H", "COST", "PROGRESS", "RECOV", "AGE"}
_GAP = 2  # spaces between columns, in both the Rich and the plain rendering
_MIN_NAME, _MIN_REASON = 16, 30  # what NAME and REASON keep before extras are added
_STATE_STYLE = {
    "RUNNING": "green",
    "SUCCEEDED": "bold green",
    "FAILED": "red",
    "HELD": "yellow",
    "RECOVERING": "magenta",
    "CANCELLED": "dim",
}


def _status_cells(r: dict[str, Any], now: datetime) -> dict[str, str]:
    prog = f"{r['progress_step'] or 0}/{r['total_steps']}" if r["total_steps"] else "-"
    return {
        "ID": r["id"],
        "NAME": r["name"],
        "STATE": r["state"],
        "AGE": _age((now - r["created_at"]).total_seconds()),
        "TEAM": r["team"],
        "WHERE": "/".join(x for x in (r["cloud"], r["region"], r["zone"]) if x) or "-",
        "INSTANCE": r["instance_id"] or "-",
        "MARKET": r["market"] or "-",
        "$/H": _money(r["price_per_hour"]) if r["price_per_hour"] else "-",
        "COST": _money(r["cost_usd"]),
        "PROGRESS": prog,
        "RECOV": str(r["recoveries"]),
        "REASON": r["reason"] or "-",
    }


def _pick_columns(cells: list[dict[str, str]], width: int | None, wide: bool) -> list[str]:
    """The columns that fit `width`: ID, NAME, STATE, AGE and REASON always (ID never cut),
    then the others by priority while they fit at their natural width."""
    if wide or width is None:
        return [c for c, _ in _COLUMNS] if wide else [c for c, p in _COLUMNS if p == 0]
    natural = {c: max([len(c)] + [len(row[c]) for row in cells]) for c, _ in _COLUMNS}
    chosen = {c for c, p in _COLUMNS if p == 0}
    used = sum(natural[c] for c in ("ID", "STATE", "AGE")) + _GAP * 4
    used += min(natural["NAME"], _MIN_NAME) + min(natural["REASON"], _MIN_REASON)
    for c, _ in sorted((x for x in _COLUMNS if x[1]), key=lambda x: x[1]):
        if used + natural[c] + _GAP <= width:
            chosen.add(c)
            used += natural[c] + _GAP
    return [c for c, _ in _COLUMNS if c in chosen]


def _fit(cols: list[str], cells: list[dict[str, str]], width: int | None) -> dict[str, int]:
    """Column widths for the plain rendering; NAME then REASON give way when too wide."""
    w = {c: max([len(c)] + [len(row[c]) for row in cells]) for c in cols}
    if width is None:
        return w
    over = sum(w.values()) + _GAP * (len(cols) - 1) - width
    for c, floor in (("REASON", _MIN_REASON), ("NAME", _MIN_NAME), ("REASON", 8)):
        if over > 0 and c in w:
            cut = min(over, max(w[c] - floor, 0))
            w[c] -= cut
            over -= cut
    return w


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def status_plain(
    rows: list[dict[str, Any]],
    now: datetime,
    *,
    width: int | None,
    wide: bool = False,
    headers: bool = True,
) -> list[str]:
    """Whitespace-separated columns for pipes and scripts (kubectl's layout): no box, no
    colour; cut to `width` only when a width is known ($COLUMNS)."""
    cells = [_status_cells(r, now) for r in rows]
    cols = _pick_columns(cells, width or 80, wide)
    w = _fit(cols, cells, None if wide else width)
    lines = []
    for row in ([{c: c for c in cols}] if headers else []) + cells:
        parts = []
        for c in cols:
            text = _cut(row[c], w[c])
            parts.append(text if c == cols[-1] else text.ljust(w[c]))
        lines.append((" " * _GAP).join(parts).rstrip())
    return lines


def status_table(
    rows: list[dict[str, Any]],
    now: datetime,
    *,
    width: int,
    wide: bool = False,
    headers: bool = True,
) -> Table:
    """The terminal rendering: the same columns as the plain one, state in colour, NAME and
    REASON folding onto more lines rather than pushing the table past the terminal."""
    cells = [_status_cells(r, now) for r in rows]
    cols = _pick_columns(cells, width, wide)
    t = Table(
        box=None,
        show_header=headers,
        header_style="bold",
        pad_edge=False,
        padding=(0, _GAP // 2),
        show_edge=False,
    )
    for c in cols:
        wrap = c in ("NAME", "REASON")
        t.add_column(
            c,
            no_wrap=not wrap,
            overflow="fold" if wrap else "ellipsis",
            justify="right" if c in _RIGHT else "left",
            min_width=len(cells[0][c]) if c == "ID" and cells else None,
        )
    for row in cells:
        t.add_row(
            *(
                Text(row[c], style=_STATE_STYLE.get(row[c], "") if c == "STATE" else "")
                for c in cols
            )
        )
    return t


def _terminal_width() -> int | None:
    """$COLUMNS when set, the terminal's width on a terminal, else None (no limit)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return out.width if out.is_terminal else None


def _stream_changes(produce: Any, interval: float, count: int | None) -> None:
    """One compact JSON document per line, each time the document changes (NDJSON)."""
    last = None
    sent = 0
    while count is None or sent < count:
        text = json.dumps(produce(), default=read_models.json_default, sort_keys=True)
        if text != last:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            last = text
            sent += 1
            if count is not None and sent >= count:
                return
        time.sleep(interval)


StateOpt = Annotated[
    list[str] | None,
    typer.Option("--state", "-s", help="Only jobs in this state (repeatable; e.g. running)"),
]


@app.command()
def status(
    config: ConfigOpt = None,
    output: Annotated[Output, typer.Option("--output", "-o", help="table, wide or json")] = (
        Output.table
    ),
    state: StateOpt = None,
    team: Annotated[str | None, typer.Option("--team", "-t", help="Only this team")] = None,
    all_jobs: Annotated[
        bool, typer.Option("--all", "-a", help="Include jobs that finished over an hour ago")
    ] = False,
    no_headers: Annotated[bool, typer.Option("--no-headers", help="No header line")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes")] = 2.0,
    count: Annotated[int | None, typer.Option(hidden=True, help="Stop after N documents")] = None,
) -> None:
    """One row per job, active and newest first: what it is doing and why."""
    states = [x for s in state or [] for x in s.split(",") if x]
    known = {x.value for x in JobState}
    bad = [x for x in states if x.upper() not in known]
    if bad:
        raise UserError(f"unknown state {bad[0]!r}: use one of {', '.join(sorted(known))}")
    cfg, engine = _engine(config)
    clock = clock_for(cfg)

    def rows(iso_times: bool = False) -> list[dict[str, Any]]:
        return read_models.job_rows(engine, states=states, team=team, iso_times=iso_times)

    def shown() -> tuple[list[dict[str, Any]], int]:
        # Scripts (-o json) get every job; people get finished ones only while recent.
        all_rows = rows()
        return (
            (all_rows, 0)
            if all_jobs or states
            else read_models.hide_finished(all_rows, clock.now())
        )

    hb = _heartbeat(engine)
    warning = _daemon_warning(cfg, hb)
    # Exit 3 when the daemon should be running but its heartbeat is stale or absent; a
    # daemon that stopped cleanly is reported, not an error.
    failing = warning is not None and "stopped" not in warning
    if output is Output.json:
        if watch:
            with contextlib.suppress(KeyboardInterrupt):
                _stream_changes(
                    lambda: read_models.document(
                        jobs=rows(iso_times=True),
                        daemon_warning=_daemon_warning(cfg, _heartbeat(engine)),
                    ),
                    interval,
                    count,
                )
            return
        # Byte for byte what _print_json writes, much faster over thousands of rows.
        jobs = read_models.job_rows_json(engine, states=states, team=team)
        doc = read_models.document(jobs=jobs, daemon_warning=warning, daemon=_lease(hb))
        sys.stdout.write(read_models.dumps_document(doc) + "\n")
        if failing:
            raise typer.Exit(3)
        return
    wide = output is Output.wide
    width = _terminal_width()

    def render() -> tuple[Any, int]:
        now = clock.now()
        job_list, hidden = shown()
        headers = not no_headers
        if out.is_terminal:
            return status_table(
                job_list, now, width=width or 80, wide=wide, headers=headers
            ), hidden
        lines = status_plain(job_list, now, width=width, wide=wide, headers=headers)
        return "\n".join(lines), hidden

    if not watch:
        body, hidden = render()
        if isinstance(body, str):
            if body:
                sys.stdout.write(body + "\n")
        else:
            out.print(body)
        if hidden:
            err.print(
                f"{hidden} job(s) that finished over an hour ago hidden: --all shows them",
                markup=False,
                highlight=False,
            )
        if warning:
            err.print(f"warning: {warning}", markup=False, highlight=False)
        elif lease_line := _lease_line(_lease(hb)):
            err.print(lease_line, markup=False, highlight=False, soft_wrap=True)
        if failing:
            raise typer.Exit(3)
        return

    def frame() -> Any:
        from rich.console import Group

        body = render()[0]
        parts = [Text(body) if isinstance(body, str) else body]  # never markup
        now_warning = _daemon_warning(cfg, _heartbeat(engine))
        if now_warning:  # the stale-daemon footer, kept current while watching
            parts.append(Text(f"warning: {now_warning}", style="yellow"))
        return Group(*parts)

    with Live(frame(), console=out, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(frame())
        except KeyboardInterrupt:
            pass


@app.command()
def show(
    job: Annotated[str, typer.Argument(help="Job id, id prefix or name")],
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """One job: attempts, events, cost."""
    cfg, engine = _engine(config)
    doc = read_models.job_detail(engine, job, cfg)
    if output is Output.json:
        _print_json(read_models.document(**doc))
        return
    clock = clock_for(cfg)
    _print_show(doc, clock.now(), _clock_note(clock))


def _clock_note(clock: Any) -> str:
    """Said next to printed times when they are the local market's sped-up time, which
    runs ahead of the wall clock (a demo's job 'created' hours from now is not a bug)."""
    speedup = getattr(clock, "speedup", 1)
    return f" (local-market time, {speedup:g}x real time)" if speedup != 1 else ""


def _print_show(doc: dict[str, Any], now: datetime, clock_note: str = "") -> None:
    """Header lines, the attempts and the events, readable at 80 columns: nothing a person
    copies (ids, pools, paths) is cut, and user text (names, reasons) is never markup."""
    j = doc["job"]
    head = Text()
    head.append(j["id"], style="bold")
    head.append(f" {j['name']} ({j['team']})  ")
    head.append(j["state"], style=_STATE_STYLE.get(j["state"], "bold"))
    head.append(f"  {j['reason']}")
    out.print(head)
    out.print(
        f"cost {_money(j['cost_usd'])}  recoveries {j['recoveries']}  "
        f"created {_when(j['created_at'])}{clock_note}",
        markup=False,
        highlight=False,
    )
    out.print(f"checkpoint {j['checkpoint_uri']}", soft_wrap=True, markup=False, highlight=False)
    # Two lines per attempt rather than an eight-column table: at 80 columns a table had
    # to cut the pool or fold every time onto three lines.
    out.print(f"attempts{' (none yet)' if not doc['attempts'] else ''}", style="bold")
    for a in doc["attempts"]:
        out.print(
            f"{a['number']:>3}  {a['pool']}  {_money(a['price_per_hour'])}/h  {_instances(a)}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        out.print(f"     {_attempt_span(a, now)}", markup=False, highlight=False)
    if doc["attempts"]:
        _print_attempt_logs(doc["attempts"][-1])
    _print_events(doc["events"], job_column=False, clock_note=clock_note)


def _attempt_span(a: dict[str, Any], now: datetime) -> str:
    """When it ran, for how long, how it ended and what it cost: '2026-06-01 00:00:05 UTC
    -> 02:10:00 (2h10m)  interrupted  $1.95'."""
    start, end = a["started_at"], a["ended_at"]
    if start is None:
        span = f"requested {_when(a['created_at'])}"
    else:
        until = end or now
        ran = _duration((until - start).total_seconds())
        if end is None:
            span = f"{_when(start)} -> now ({ran})"
        else:
            same_day = start.astimezone().date() == end.astimezone().date()
            stop = end.astimezone().strftime("%H:%M:%S") if same_day else _when(end)
            span = f"{_when(start)} -> {stop} ({ran})"
    how = a["end_reason"] or a["state"].lower()
    return f"{span}  {how}  {_money(a['cost_usd'])}"


def _duration(seconds: float) -> str:
    """1h05m, 12m30s, 45s: hours and minutes, or minutes and seconds under an hour."""
    s = max(int(seconds), 0)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


FAILED_TAIL = 10  # stderr lines `show` prints for a failed attempt


def _print_attempt_logs(a: dict[str, Any]) -> None:
    """Where the latest attempt's output is and, when it failed, the end of its stderr."""
    logs = a["logs"]
    if logs.get("available"):
        # One line whatever the terminal: a path is for copying, not for wrapping.
        out.print(
            f"logs {logs['dir']}  (spotwise logs JOB)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    else:
        out.print(f"logs: {logs['note']}", markup=False, highlight=False)
        if logs.get("console_command"):
            out.print(f"console: {logs['console_command']}", markup=False, highlight=False)
    failed = a["end_reason"] == "failed" or (a["exit_code"] not in (None, 0, 75))
    if failed and logs.get("available"):
        lines = read_models.tail(Path(logs["stderr"]), FAILED_TAIL)
        out.print(
            f"last {len(lines)} lines of stderr (attempt {a['number']}):"
            if lines
            else f"stderr of attempt {a['number']} is empty",
            markup=False,
            highlight=False,
        )
        for line in lines:
            out.print(f"  {line}", markup=False, highlight=False)


def _when(ts: datetime | None) -> str:
    """A date, a time and a zone (the viewer's local zone; UTC on most servers)."""
    return ts.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if ts else "-"


def _print_events(
    events: list[dict[str, Any]], *, job_column: bool = True, clock_note: str = ""
) -> None:
    """The audit log as a table; `show` leaves out the JOB column (it is one job's)."""
    t = Table(title=f"events{clock_note}", title_justify="left")
    columns = ("AT", "JOB", "KIND", "MESSAGE") if job_column else ("AT", "KIND", "MESSAGE")
    for c in columns:
        # Times and ids never wrap (they are read and copied whole); messages fold, long
        # words (pools, paths) included, rather than being cut.
        t.add_column(c, no_wrap=c != "MESSAGE", overflow="fold" if c == "MESSAGE" else "ellipsis")
    for e in events:
        style = {"warning": "yellow", "error": "red"}.get(e["level"], "")
        cells = [Text(_when(e["at"])), Text(e["kind"], style=style), Text(e["message"])]
        if job_column:
            cells.insert(1, Text(e["job_id"] or "-"))
        t.add_row(*cells)
    out.print(t)


def follow(
    paths: list[Path],
    running: Any,
    write: Any,
    *,
    interval: float = 0.5,
    sleep: Any = time.sleep,
) -> None:
    """tail -f over several files until `running()` is false and nothing new is left: a
    file that does not exist yet is waited for, a line is written whole."""
    offsets = dict.fromkeys(paths, 0)
    partial = dict.fromkeys(paths, "")
    while True:
        alive = running()
        got = False
        for p in paths:
            try:
                with p.open("rb") as f:
                    f.seek(offsets[p])
                    data = f.read()
                    offsets[p] = f.tell()
            except OSError:
                continue
            if data:
                got = True
                text = partial[p] + data.decode(errors="replace")
                *lines, partial[p] = text.split("\n")
                for line in lines:
                    write(line)
        if not alive and not got:
            for p in paths:
                if partial[p]:
                    write(partial[p])
            return
        sleep(interval)


class Stream(StrEnum):
    both = "both"
    stdout = "stdout"
    stderr = "stderr"


@app.command()
def logs(
    job: Annotated[str, typer.Argument(help="Job id, id prefix or name")],
    attempt: Annotated[
        int | None, typer.Option("--attempt", "-a", help="Attempt number (default: latest)")
    ] = None,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the attempt ends")
    ] = False,
    stream: Annotated[Stream, typer.Option(help="both, stdout or stderr")] = Stream.both,
    config: ConfigOpt = None,
) -> None:
    """A job's stdout and stderr (the local market's files; for clouds, where they are)."""
    cfg, engine = _engine(config)
    doc = read_models.job_detail(engine, job, cfg)
    attempts = doc["attempts"]
    if not attempts:
        raise UserError(f"job {doc['job']['id']} has no attempts yet: it has not been placed")
    chosen = (
        attempts[-1]
        if attempt is None
        else next((a for a in attempts if a["number"] == attempt), None)
    )
    if chosen is None:
        have = ", ".join(str(a["number"]) for a in attempts)
        raise UserError(f"job {doc['job']['id']} has no attempt {attempt} (attempts: {have})")
    where = chosen["logs"]
    if not where.get("available"):
        err.print(where["note"], markup=False, highlight=False)
        if where.get("console_command"):
            err.print(f"console output: {where['console_command']}", markup=False, highlight=False)
        raise typer.Exit(1)
    names = ["stdout", "stderr"] if stream is Stream.both else [stream.value]
    paths = [Path(where[n]) for n in names]

    def write(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    if not follow_:
        for p in paths:
            if len(paths) > 1:
                write(f"==> {p.name} <==")
            try:
                sys.stdout.write(p.read_text(errors="replace"))
            except OSError:
                err.print(f"{p}: not written yet", markup=False, highlight=False)
        return
    attempt_id = chosen["id"]

    def running() -> bool:
        from sqlmodel import Session

        from scheduler.core.states import AttemptState
        from scheduler.state.models import Attempt

        with Session(engine) as s:
            row = s.get(Attempt, attempt_id)
            return row is not None and row.state is not AttemptState.ENDED

    with contextlib.suppress(KeyboardInterrupt):
        follow(paths, running, write)


@app.command()
def cancel(
    job: Annotated[str | None, typer.Argument(help="Job id, id prefix or name")] = None,
    team: Annotated[
        str | None, typer.Option("--team", "-t", help="Every unfinished job of this team")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Cancel a job, or every unfinished job of a team (instances checkpoint and stop)."""
    from scheduler.state.desired import cancel as cancel_job

    if (job is None) == (team is None):
        raise UserError("give a JOB or --team TEAM (not both)")
    cfg, engine = _engine(config)
    now = clock_for(cfg).now()
    if job is not None:
        ids = [cancel_job(engine, job, now).id]
    else:
        rows = read_models.job_rows(engine, team=team)
        live = [r["id"] for r in rows if not JobState(r["state"]).terminal]
        ids = [cancel_job(engine, i, now).id for i in live]
        if not ids:
            err.print(f"no unfinished jobs in team {team!r}", markup=False, highlight=False)
    for i in ids:
        out.print(f"cancel requested for {i}", markup=False, highlight=False)
    warning = _daemon_warning(cfg, _heartbeat(engine))
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)


@app.command()
def release(
    job: Annotated[str, typer.Argument(help="A HELD job: id, id prefix or name")],
    config: ConfigOpt = None,
) -> None:
    """Put a HELD job back in the queue (a budget that still binds holds it again)."""
    from scheduler.state.requeue import release as release_job

    cfg, engine = _engine(config)
    j = release_job(engine, job, clock_for(cfg).now())
    out.print(f"{j.id} released: {j.state.value}", markup=False, highlight=False)
    warning = _daemon_warning(cfg, _heartbeat(engine))
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)


@app.command()
def requeue(
    job: Annotated[str, typer.Argument(help="A FAILED job: id, id prefix or name")],
    config: ConfigOpt = None,
) -> None:
    """Run a FAILED job again, with its failure counters reset."""
    from scheduler.state.requeue import requeue as requeue_job

    cfg, engine = _engine(config)
    j = requeue_job(engine, job, clock_for(cfg).now())
    out.print(f"{j.id} requeued: {j.state.value}", markup=False, highlight=False)
    warning = _daemon_warning(cfg, _heartbeat(engine))
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)


@app.command()
def prices(
    gpu: Annotated[str | None, typer.Option(help="GPU model, e.g. A100")] = None,
    cloud: Annotated[str | None, typer.Option(help="aws, gcp, azure")] = None,
    market: Annotated[str | None, typer.Option(help="spot or on-demand")] = None,
    limit: Annotated[int, typer.Option(help="Rows to show (table)")] = 30,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Current offerings from the configured providers, cheapest first."""
    cfg = load_config(config)
    rows, problems = read_models.live_offerings(
        build_providers(cfg), gpu=gpu, cloud=cloud, market=market
    )
    for p in problems:
        err.print(f"warning: {p}", markup=False, highlight=False)
    if output is Output.json:
        _print_json(read_models.document(offerings=rows, errors=problems))
        return
    t = Table(title=f"{len(rows)} offerings", title_justify="left")
    for c in ("CLOUD", "REGION", "ZONE", "TYPE", "GPU", "MARKET", "$/H", "$/GPU-H"):
        t.add_column(c)
    for r in rows[:limit]:
        per_gpu = r["price_per_hour"] / max(r["gpu_count"], 1)
        t.add_row(
            r["cloud"],
            r["region"],
            r["zone"],
            r["instance_type"],
            f"{r['gpu_count']}x {r['gpu_model']} {r['gpu_memory_gb']:g}GB",
            r["market"],
            f"{r['price_per_hour']:.4f}",
            f"{per_gpu:.4f}",
        )
    out.print(t)


@app.command()
def budget(config: ConfigOpt = None, output: OutputOpt = Output.table) -> None:
    """Each budget: limit, window, spent, projected to the window's end, state."""
    cfg, engine = _engine(config)
    rows = read_models.budget_rows(engine, cfg, clock_for(cfg).now())
    if output is Output.json:
        _print_json(read_models.document(budgets=rows))
        return
    t = Table(
        title="budgets",
        title_justify="left",
        caption="PROJECTED: spend at the end of the current window if BURN/H goes on "
        "(none for a total window)",
        caption_justify="left",
    )
    for c in ("NAME", "SCOPE", "WINDOW", "LIMIT", "SPENT", "BURN/H", "PROJECTED", "KIND", "STATE"):
        t.add_column(c)
    for r in rows:
        t.add_row(
            *(Text(x) for x in (r["name"], r["scope"])),
            r["window"],
            _money(r["limit_usd"]),
            _money(r["spent_usd"]),
            _money(r["burn_per_hour"]),
            _money(r["projected_usd"]),
            "hard" if r["hard"] else "soft",
            Text(r["state"]),
        )
    out.print(t)


def _since(text: str | None, now: datetime) -> datetime | None:
    """'7d' (back from now) or an ISO time; None for no bound."""
    if not text:
        return None
    from datetime import UTC

    from providers.settings import parse_duration

    try:
        return now - parse_duration(text)
    except (ValueError, TypeError):
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{text!r} is neither a duration (7d, 12h) nor an ISO time") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


class CostBy(StrEnum):
    team = "team"
    job = "job"
    cloud = "cloud"
    day = "day"


@app.command()
def cost(
    by: Annotated[CostBy, typer.Option("--by", help="team, job, cloud or day")] = CostBy.team,
    since: Annotated[str | None, typer.Option(help="7d, 12h or an ISO time")] = "30d",
    until: Annotated[str | None, typer.Option(help="ISO time or duration ago")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """What was spent, by team, job, cloud or day (the hourly spend budgets use)."""
    cfg, engine = _engine(config)
    now = clock_for(cfg).now()
    start, end = _since(since, now), _since(until, now)
    rows = read_models.cost_rows(engine, by.value, start, end)
    total = round(sum(r["cost_usd"] for r in rows), 6)
    if output is Output.json:
        _print_json(
            read_models.document(by=by.value, since=start, until=end, total_usd=total, costs=rows)
        )
        return
    span = f"since {_when(start)}" if start else "all time"
    t = Table(title=f"cost by {by.value}, {span}", title_justify="left")
    cols = [by.value.upper()] + (["NAME"] if by is CostBy.job else []) + ["JOBS", "COST"]
    for c in cols:
        t.add_column(c, justify="right" if c in ("JOBS", "COST") else "left")
    for r in rows:
        cells = [r[by.value]] + ([r["name"]] if by is CostBy.job else [])
        t.add_row(*(Text(x) for x in cells), str(r["jobs"]), _money(r["cost_usd"]))
    t.add_row(Text("total", style="bold"), *([""] * (len(cols) - 2)), _money(total))
    out.print(t)


class ReportBy(StrEnum):
    job = "job"
    team = "team"
    cloud = "cloud"


@app.command()
def report(
    since: Annotated[str | None, typer.Option(help="7d, 12h or an ISO time; '' for all")] = "30d",
    until: Annotated[str | None, typer.Option(help="ISO time or duration ago")] = None,
    by: Annotated[ReportBy, typer.Option("--by", help="job, team or cloud")] = ReportBy.team,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML report")
    ] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Spend against the cheapest adequate on-demand, savings, interruptions, GPU-hours."""
    from scheduler.state import report as rep

    cfg, engine = _engine(config)
    now = clock_for(cfg).now()
    start, end = _since(since, now), _since(until, now)
    rules = cfg.budget_rules()
    facts = rep.load(engine, start, end, now, rules)
    offerings, problems = rep.ondemand_offerings(build_providers(cfg))
    doc = rep.build(facts, offerings, rules, by.value, since=start, until=end, problems=problems)
    if html is not None:
        from scheduler.cli.report_html import render

        _write_text(html, render(doc))
        err.print(f"wrote {html}", markup=False, highlight=False)
    if output is Output.json:
        _print_json(read_models.document(**doc.to_dict()))
        return
    _print_report(doc)


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def _print_report(doc: Any) -> None:
    by = doc.by
    span = f"since {_when(doc.window.start)}" if doc.window.start else "all time"
    t = Table(title=f"cost report by {by}, {span}", title_justify="left")
    extra = {"job": ["NAME", "TEAM"], "team": ["BUDGETS"], "cloud": []}[by]
    nums = ["COST", "ON-DEMAND*", "SAVINGS", "SAVED", "INTR", "HOURS", "LOST H*", "GPU-H"]
    headers = [by.upper(), *extra, *nums]

    def cells(r: Any, total: bool) -> list[Any]:
        lead = {
            "job": ["", ""] if total else [r.name, r.team],
            "team": [""] if total else [", ".join(sorted(r.budgets)) or "none"],
            "cloud": [],
        }[by]
        pct = r.savings_pct
        return [
            *(Text(x) for x in [r.key, *lead]),
            _money(r.cost_usd),
            _money(r.ondemand_usd),
            _money(r.savings_usd),
            "-" if pct is None else f"{pct:.1f}%",
            str(r.interruptions),
            f"{r.hours:,.2f}",
            f"{r.lost_hours:,.2f}",
            f"{r.gpu_hours:,.2f}",
        ]

    rows = [cells(r, False) for r in doc.rows] + [cells(doc.total, True)]
    # As `status` does: drop the lower-value columns until the table fits the terminal
    # rather than shorten every cell (-o json keeps every figure; piped output keeps all).
    limit = _terminal_width()
    keep = list(range(len(headers)))
    widths = [max(len(str(x[i])) for x in [headers, *rows]) for i in keep]
    for drop in ("GPU-H", "LOST H*", "HOURS", "INTR", "SAVINGS", "TEAM", "BUDGETS"):
        if limit is None or sum(widths[i] + 3 for i in keep) + 1 <= limit:
            break
        if drop in headers:
            keep.remove(headers.index(drop))
    for i in keep:
        t.add_column(headers[i], justify="right" if headers[i] in nums else "left", no_wrap=True)
    for k, row in enumerate(rows):
        t.add_row(*(row[i] for i in keep), style="bold" if k == len(rows) - 1 else None)
    out.print(t, width=limit)
    for note in doc.notes:
        out.print(Text(f"* {note}"), width=min(limit or 100, 100))


@app.command()
def events(
    job: Annotated[str | None, typer.Option("--job", "-j", help="Only this job")] = None,
    limit: Annotated[int, typer.Option(help="Newest N events")] = 50,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The audit log: what the daemon decided and why."""
    cfg, engine = _engine(config)
    rows = read_models.event_rows(engine, job, limit)
    if output is Output.json:
        _print_json(read_models.document(events=rows))
        return
    _print_events(rows, clock_note=_clock_note(clock_for(cfg)))


@app.command("check-config")
def check_config(
    file: Annotated[Path | None, typer.Argument(help="Config file to validate")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Validate a config file; exit 2 with one message per problem."""
    path = file or config
    cfg = load_config(path)
    providers = [
        n for n in ("local", "aws", "gcp", "azure") if getattr(cfg.providers, n) is not None
    ]
    if output is Output.json:
        _print_json(
            read_models.document(
                ok=True,
                file=str(path) if path else None,
                providers=providers,
                budgets=[b.name for b in cfg.budgets],
                database_url=cfg.daemon.masked_database_url(),
                state_dir=str(cfg.daemon.resolved_state_dir()),
            )
        )
        return
    out.print(
        f"ok {path or 'built-in defaults'}: providers {', '.join(providers)}; "
        f"{len(cfg.budgets)} budget(s); database {cfg.daemon.masked_database_url()}",
        markup=False,
        highlight=False,
    )


db_app = typer.Typer(help="The database schema (Alembic migrations).", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Bring the database schema to this version (the daemon also does it on start)."""
    from scheduler.state.db import make_engine, upgrade

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    before, after = upgrade(make_engine(url, create_dir=True))
    where = redact_url(url)
    if before == after:
        out.print(f"{where}: schema already at {after}", markup=False, highlight=False)
    else:
        out.print(f"{where}: schema {before or 'empty'} -> {after}", markup=False, highlight=False)


service_app = typer.Typer(help="Run the daemon as a systemd service.", no_args_is_help=True)
app.add_typer(service_app, name="service")


@service_app.command("install")
def service_install(
    root: Annotated[
        Path | None,
        typer.Option(help="Stage into this directory; commands are recorded, not run"),
    ] = None,
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="Remove the unit (config and state are kept)")
    ] = False,
) -> None:
    """User, venv, config, unit and tmpfiles for the daemon; safe to run again."""
    from scheduler.daemon import service

    report = service.uninstall(root) if uninstall else service.install(root)
    for line in report.lines():
        out.print(line, markup=False, highlight=False)
    if not uninstall and report.ran:
        out.print("next: systemctl enable --now spotwise", markup=False, highlight=False)


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Keep the demo's state here")] = None,
    speedup: Annotated[float, typer.Option(help="Market seconds per real second")] = 120.0,
) -> None:
    """The whole system on the local market, start to finish (a minute or two)."""
    from scheduler.lab.demo import run_demo

    # Piped output gets a width that fits the tables instead of Rich's 80-column default.
    raise typer.Exit(run_demo(workdir=workdir, speedup=speedup, console=out))


def _print_error(text: str, exit_code: int) -> None:
    """Each problem on its own 'error: ' line, as plain text (no Rich markup), passwords masked."""
    from scheduler.core.errors import mask_urls

    red = sys.stderr.isatty()
    for line in mask_urls(str(text)).splitlines() or [""]:
        prefix = "\x1b[31merror:\x1b[0m" if red else "error:"
        sys.stderr.write(f"{prefix} {line}\n")
    sys.stderr.flush()
    sys.exit(exit_code)


_last_db_url: list[str] = []  # the URL of the database most recently connected to


def _remember_db_urls() -> None:
    """Note each engine's URL as it connects, so a database error can say which database."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "handle_error")
    def _failed(ctx) -> None:  # type: ignore[no-untyped-def]
        if ctx.engine is not None:  # also set for errors while connecting
            _last_db_url[:] = [ctx.engine.url.render_as_string(hide_password=True)]


def _database_problem(e: Exception) -> str:
    where = _last_db_url[0] if _last_db_url else "the configured database_url"
    detail = str(getattr(e, "orig", None) or e).splitlines()[0] if str(e) else type(e).__name__
    text = detail.lower()
    if "not a database" in text or "malformed" in text or "no such table" in text:
        return f"the database at {where} is not a spotwise database or is corrupted: {detail}"
    return f"the database at {where} cannot be used: {detail}"


def main() -> None:
    import sqlite3

    from sqlalchemy.exc import DatabaseError

    _remember_db_urls()
    try:
        app()
    except UserError as e:
        _print_error(str(e), e.exit_code)
    except (DatabaseError, sqlite3.DatabaseError) as e:
        _print_error(_database_problem(e), UserError.exit_code)


def _instances(a: dict) -> str:
    """A gang's instances in `show`: node 0's id and how many nodes (each is billed)."""
    first = a["instance_id"] or "-"
    n = a.get("nodes") or 1
    return first if n <= 1 else f"{first} (+{max(0, len(a.get('instances') or []) - 1)}, {n} nodes)"
