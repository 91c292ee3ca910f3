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
from typing import Annotated, Any

import typer

from scheduler.cli.columns import Col, Layout, layout, lines, rich_lines
from scheduler.cli.common import (
    STATE_STYLE,
    ConfigOpt,
    Output,
    ScreenClock,
    WideOutputOpt,
    ago,
    daemon_warning,
    money,
    open_reads,
    out_console,
    pool_label,
    print_daemon_warning,
    print_err,
    screen_clock,
    stdout_is_terminal,
    terminal_width,
    where,
)

commands = typer.Typer()


def _age(seconds: float) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


# Status columns in display order, each with its drop priority (0: always shown; the
# highest goes first when the terminal is narrow). REASON is last: the free text, shortened
# at a word when it does not fit, then NAME; nothing else is ever cut.
COLUMNS = (
    Col("ID"),
    Col("NAME"),
    Col("STATE"),
    Col("AGE", right=True),
    Col("TEAM", 8),
    Col("WHERE", 3),
    Col("INSTANCE", 6),
    Col("MARKET", 7),
    Col("$/H", 2, right=True),
    Col("COST", 1, right=True),
    Col("PROGRESS", 4, right=True),
    Col("RECOV", 5, right=True),
    Col("REASON"),
)
SHRINK = (("REASON", 30), ("NAME", 16), ("REASON", 8))
STYLES = {"STATE": STATE_STYLE}


def _status_cells(
    r: dict[str, Any], now: datetime, screen: ScreenClock | None = None
) -> dict[str, str]:
    """One job's cells. `now` is the wall clock; stored times go through `screen` (the
    local market's time runs ahead of it). A gang's $/H is the gang's: every node is billed."""
    prog = f"{r['progress_step'] or 0}/{r['total_steps']}" if r["total_steps"] else "-"
    created: datetime = (screen.wall(r["created_at"]) if screen else None) or r["created_at"]
    price = r["price_per_hour"]
    nodes = r.get("nodes") or 1
    reason = r["reason"] or "-"
    if r.get("provider") == "local" and r["cloud"]:
        pool = f"{r['cloud']}/{r['zone']}/{r['instance_type']}/{r['market']}"
        reason = reason.replace(pool, pool_label("local", pool))
    return {
        "ID": r["id"],
        "NAME": r["name"],
        "STATE": r["state"],
        "AGE": _age((now - created).total_seconds()),
        "TEAM": r["team"],
        "WHERE": where(r.get("provider"), r["cloud"], r["region"], r["zone"]),
        "INSTANCE": r["instance_id"] or "-",
        "MARKET": r["market"] or "-",
        "$/H": money(price * nodes) if price else "-",
        "COST": money(r["cost_usd"]),
        "PROGRESS": prog,
        "RECOV": str(r["recoveries"]),
        "REASON": reason,
    }


def status_layout(
    cells: list[dict[str, str]],
    width: int | None,
    *,
    wide: bool = False,
    keep: list[str] | None = None,
) -> Layout:
    """The columns for `width`: ID, NAME, STATE, AGE and REASON always, then the others by
    priority while they fit; `keep` (a watcher's first frame) holds them still."""
    return layout(COLUMNS, cells, width, shrink=SHRINK, wide=wide, keep=keep)


def status_plain(
    rows: list[dict[str, Any]],
    now: datetime,
    *,
    width: int | None,
    wide: bool = False,
    headers: bool = True,
    screen: ScreenClock | None = None,
) -> list[str]:
    """Plain columns for a pipe (and a terminal, in colour: see `render`)."""
    cells = [_status_cells(r, now, screen) for r in rows]
    return lines(status_layout(cells, width, wide=wide), cells, headers=headers)


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
    typer.Option(
        "--state",
        "-s",
        metavar="STATE",
        help="Only jobs in this state (repeatable, or a,b; e.g. running)",
        autocompletion=lambda incomplete: complete_states(incomplete),
    ),
]


def complete_states(incomplete: str) -> list[str]:
    from scheduler.core.states import JobState

    return [s.value.lower() for s in JobState if s.value.lower().startswith(incomplete.lower())]


@commands.command()
def status(
    config: ConfigOpt = None,
    output: WideOutputOpt = Output.table,
    state: StateOpt = None,
    team: Annotated[
        str | None, typer.Option("--team", "-t", metavar="TEAM", help="Only this team")
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", metavar="USER", help="Only jobs this Unix user submitted"),
    ] = None,
    all_jobs: Annotated[
        bool, typer.Option("--all", "-a", help="Include jobs that finished over an hour ago")
    ] = False,
    no_headers: Annotated[bool, typer.Option("--no-headers", help="No header line")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C")] = False,
    interval: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds between refreshes")
    ] = 2.0,
    count: Annotated[int | None, typer.Option(hidden=True, help="Stop after N documents")] = None,
) -> None:
    """One row per job, active and newest first: what it is doing and why."""
    from scheduler.core.errors import UserError
    from scheduler.core.states import JobState
    from scheduler.state import read_models

    states = [x for s in state or [] for x in s.split(",") if x]
    known = {x.value for x in JobState}
    bad = [x for x in states if x.upper() not in known]
    if bad:
        raise UserError(f"unknown state {bad[0]!r}: use one of {', '.join(sorted(known))}")
    from scheduler.cli.remote import target, with_times

    api = target()
    if api is not None:  # an API server's answers, printed by the same code below
        screen = api.screen()

        def rows(iso_times: bool = False) -> list[dict[str, Any]]:
            jobs = api.status_document(states, team, user)["jobs"]
            return jobs if iso_times else with_times(jobs)  # type: ignore[no-any-return]

        def heartbeat() -> tuple[dict[str, Any] | None, str | None]:
            return api.heartbeat()
    else:
        cfg, db = open_reads(config, warn=output != "json")
        screen = screen_clock(cfg)

        def rows(iso_times: bool = False) -> list[dict[str, Any]]:
            found = read_models.job_rows(db, states=states, team=team, iso_times=iso_times)
            return [r for r in found if r["submitted_by"] == user] if user else found

        def heartbeat() -> tuple[dict[str, Any] | None, str | None]:
            lease = read_models.daemon_heartbeat(db)
            return lease, daemon_warning(cfg, lease)

    def shown() -> tuple[list[dict[str, Any]], int]:
        # Scripts (-o json) get every job; people get finished ones only while recent (an
        # hour of the viewer's time, whatever the market's speed).
        all_rows = rows()
        if all_jobs or states:
            return all_rows, 0
        cutoff = screen.daemon_time(datetime.now(UTC) - read_models.FINISHED_VISIBLE)
        return read_models.hide_finished(all_rows, cutoff)

    lease, warning = heartbeat()
    # Exit 3 when the daemon should be running but its heartbeat is stale or absent; a
    # daemon that stopped cleanly is reported, not an error.
    failing = warning is not None and "stopped" not in warning
    if output == "json":
        if watch:
            with contextlib.suppress(KeyboardInterrupt):
                _stream_changes(
                    lambda: read_models.document(
                        jobs=rows(iso_times=True), daemon_warning=heartbeat()[1]
                    ),
                    interval,
                    count,
                )
            return
        # Byte for byte what print_json writes, much faster over thousands of rows, and
        # written while it is encoded (see read_models.EncodedJson).
        if api is not None:
            doc = api.status_document(states, team, user)
            doc = read_models.document(
                jobs=doc["jobs"], daemon_warning=doc["daemon_warning"], daemon=doc["daemon"]
            )
        elif user:
            doc = read_models.document(
                jobs=rows(iso_times=True), daemon_warning=warning, daemon=lease
            )
        else:
            jobs = read_models.job_rows_json(db, states=states, team=team)
            doc = read_models.document(jobs=jobs, daemon_warning=warning, daemon=lease)
        read_models.write_document(doc, sys.stdout.write)
        sys.stdout.write("\n")
        if failing:
            raise typer.Exit(3)
        return
    wide = output == "wide"
    width = terminal_width()
    on_terminal = stdout_is_terminal()
    kept: list[list[str]] = []  # a watcher's columns, chosen on its first frame

    def render() -> tuple[Any, int]:
        now = datetime.now(UTC)
        job_list, hidden = shown()
        cells = [_status_cells(r, now, screen) for r in job_list]
        lay = status_layout(cells, width, wide=wide, keep=kept[0] if kept else None)
        if watch and not kept:
            kept.append(lay.names)
        headers = not no_headers
        if on_terminal:
            return rich_lines(lay, cells, headers=headers, styles=STYLES), hidden
        return "\n".join(lines(lay, cells, headers=headers)), hidden

    if not watch:
        body, hidden = render()
        if isinstance(body, str):
            if body:
                sys.stdout.write(body + "\n")
        else:
            console = out_console()
            for line in body:
                console.print(line, soft_wrap=True)
        if hidden:
            print_err(f"{hidden} job(s) that finished over an hour ago hidden: --all shows them")
        if note := screen.note():
            print_err(note)
        if warning:
            print_daemon_warning(warning)
        elif lease_line := _lease_line(lease):
            print_err(lease_line, soft_wrap=True)
        if failing:
            raise typer.Exit(3)
        return
    _watch_table(render, lambda: heartbeat()[1], interval)


def _watch_table(render: Any, current_warning: Any, interval: float) -> None:
    """The table redrawn every `interval` seconds until Ctrl-C, with the stale-daemon
    footer kept current and the columns of the first frame kept (a row that grows shortens
    the reason rather than changing the columns under the reader's eyes)."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    def frame() -> Any:
        body = render()[0]
        parts = [Text(body)] if isinstance(body, str) else list(body)  # never markup
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
