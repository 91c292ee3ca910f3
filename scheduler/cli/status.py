"""`spotwise status`: one row per job, laid out for a terminal, a pipe or a script.

The layout keeps what people copy (ids) whole and drops lower-value columns before cutting
text when the terminal is narrow; a pipe gets kubectl-style plain columns (no Rich), a script
`-o json` (the rows encoded a column at a time: see read_models.job_rows_json). The heartbeat
is read once per command, so the warning, the exit code and the lease line agree.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from scheduler.cli.common import (
    STATE_STYLE,
    ConfigOpt,
    Output,
    ago,
    daemon_warning,
    money,
    open_reads,
    out_console,
    print_daemon_warning,
    print_err,
    stdout_is_terminal,
    terminal_width,
)

if TYPE_CHECKING:
    from rich.table import Table

commands = typer.Typer()


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
        "$/H": money(r["price_per_hour"]) if r["price_per_hour"] else "-",
        "COST": money(r["cost_usd"]),
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
    from rich.table import Table
    from rich.text import Text

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
            *(Text(row[c], style=STATE_STYLE.get(row[c], "") if c == "STATE" else "") for c in cols)
        )
    return t


def _lease_line(lease: dict[str, Any] | None) -> str | None:
    if lease is None or lease["status"] == "stopped":
        return None
    since = lease["since"].astimezone(UTC)
    now = datetime.now(UTC)
    held = ago((now - since).total_seconds())
    # the time of day alone when it is today's: the whole date made the line 81 columns
    when = f"{since:%H:%M:%S}Z" if since.date() == now.date() else f"{since:%Y-%m-%d %H:%M:%S}Z"
    return (
        f"daemon: pid {lease['pid']} on {lease['host']} holds the lease since {when} "
        f"({held}, epoch {lease['epoch']})"
    )


def _stream_changes(produce: Any, interval: float, count: int | None) -> None:
    """One compact JSON document per line, each time the document changes (NDJSON)."""
    from scheduler.state.read_models import json_default

    last = None
    sent = 0
    while count is None or sent < count:
        text = json.dumps(produce(), default=json_default, sort_keys=True)
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


@commands.command()
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
    from scheduler.core.errors import UserError
    from scheduler.core.states import JobState
    from scheduler.daemon.wiring import clock_for
    from scheduler.state import read_models

    states = [x for s in state or [] for x in s.split(",") if x]
    known = {x.value for x in JobState}
    bad = [x for x in states if x.upper() not in known]
    if bad:
        raise UserError(f"unknown state {bad[0]!r}: use one of {', '.join(sorted(known))}")
    cfg, db = open_reads(config)
    clock = clock_for(cfg, read_only=True)

    def rows(iso_times: bool = False) -> list[dict[str, Any]]:
        return read_models.job_rows(db, states=states, team=team, iso_times=iso_times)

    def shown() -> tuple[list[dict[str, Any]], int]:
        # Scripts (-o json) get every job; people get finished ones only while recent.
        all_rows = rows()
        return (
            (all_rows, 0)
            if all_jobs or states
            else read_models.hide_finished(all_rows, clock.now())
        )

    lease = read_models.daemon_heartbeat(db)
    warning = daemon_warning(cfg, lease)
    # Exit 3 when the daemon should be running but its heartbeat is stale or absent; a
    # daemon that stopped cleanly is reported, not an error.
    failing = warning is not None and "stopped" not in warning
    if output is Output.json:
        if watch:
            with contextlib.suppress(KeyboardInterrupt):
                _stream_changes(
                    lambda: read_models.document(
                        jobs=rows(iso_times=True),
                        daemon_warning=daemon_warning(cfg, read_models.daemon_heartbeat(db)),
                    ),
                    interval,
                    count,
                )
            return
        # Byte for byte what print_json writes, much faster over thousands of rows.
        jobs = read_models.job_rows_json(db, states=states, team=team)
        doc = read_models.document(jobs=jobs, daemon_warning=warning, daemon=lease)
        sys.stdout.write(read_models.dumps_document(doc) + "\n")
        if failing:
            raise typer.Exit(3)
        return
    wide = output is Output.wide
    width = terminal_width()
    on_terminal = stdout_is_terminal()

    def render() -> tuple[Any, int]:
        now = clock.now()
        job_list, hidden = shown()
        headers = not no_headers
        if on_terminal:
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
            out_console().print(body)
        if hidden:
            print_err(f"{hidden} job(s) that finished over an hour ago hidden: --all shows them")
        if warning:
            print_daemon_warning(warning)
        elif lease_line := _lease_line(lease):
            print_err(lease_line, soft_wrap=True)
        if failing:
            raise typer.Exit(3)
        return
    _watch_table(render, lambda: daemon_warning(cfg, read_models.daemon_heartbeat(db)), interval)


def _watch_table(render: Any, current_warning: Any, interval: float) -> None:
    """The table redrawn every `interval` seconds until Ctrl-C, with the stale-daemon
    footer kept current."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    def frame() -> Any:
        body = render()[0]
        parts = [Text(body) if isinstance(body, str) else body]  # never markup
        now_warning = current_warning()
        if now_warning:  # the stale-daemon footer, kept current while watching
            parts.append(Text(f"warning: {now_warning}", style="yellow"))
        return Group(*parts)

    with Live(frame(), console=out_console(), refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(frame())
        except KeyboardInterrupt:
            pass
