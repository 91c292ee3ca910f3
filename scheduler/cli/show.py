"""`spotwise show` (one job: its attempts, where its logs are, its events) and `spotwise
events` (the audit log), and how both print events.

Readable at 80 columns: nothing a person copies (ids, pools, paths) is cut, and user text
(names, reasons, messages) is never taken for Rich markup.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from scheduler.cli.common import (
    STATE_STYLE,
    ConfigOpt,
    Output,
    OutputOpt,
    money,
    open_reads,
    out_console,
    print_json,
    print_out,
    when,
)

if TYPE_CHECKING:
    from rich.console import Console

commands = typer.Typer()

FAILED_TAIL = 10  # stderr lines `show` prints for a failed attempt


@commands.command()
def show(
    job: Annotated[str, typer.Argument(help="Job id, id prefix or name")],
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """One job: attempts, events, cost."""
    from scheduler.daemon.wiring import clock_for
    from scheduler.state import read_models

    cfg, db = open_reads(config)
    doc = read_models.job_detail(db, job, cfg)
    if output is Output.json:
        print_json(read_models.document(**doc))
        return
    clock = clock_for(cfg, read_only=True)
    _print_show(doc, clock.now(), clock_note(clock))


@commands.command()
def events(
    job: Annotated[str | None, typer.Option("--job", "-j", help="Only this job")] = None,
    limit: Annotated[int, typer.Option(help="Newest N events")] = 50,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The audit log: what the daemon decided and why."""
    from scheduler.daemon.wiring import clock_for
    from scheduler.state import read_models

    cfg, db = open_reads(config)
    rows = read_models.event_rows(db, job, limit)
    if output is Output.json:
        print_json(read_models.document(events=rows))
        return
    print_events(out_console(), rows, clock_note=clock_note(clock_for(cfg, read_only=True)))


def clock_note(clock: Any) -> str:
    """Said next to printed times when they are the local market's sped-up time, which
    runs ahead of the wall clock (a demo's job 'created' hours from now is not a bug)."""
    speedup = getattr(clock, "speedup", 1)
    return f" (local-market time, {speedup:g}x real time)" if speedup != 1 else ""


def _print_show(doc: dict[str, Any], now: datetime, clock_note: str = "") -> None:
    """Header lines, the attempts and the events, readable at 80 columns: nothing a person
    copies (ids, pools, paths) is cut, and user text (names, reasons) is never markup."""
    from rich.text import Text

    out = out_console()
    j = doc["job"]
    head = Text()
    head.append(j["id"], style="bold")
    head.append(f" {j['name']} ({j['team']})  ")
    head.append(j["state"], style=STATE_STYLE.get(j["state"], "bold"))
    head.append(f"  {j['reason']}")
    out.print(head)
    print_out(
        f"cost {money(j['cost_usd'])}  recoveries {j['recoveries']}  "
        f"created {when(j['created_at'])}{clock_note}",
        console=out,
    )
    print_out(f"checkpoint {j['checkpoint_uri']}", soft_wrap=True, console=out)
    # Two lines per attempt rather than an eight-column table: at 80 columns a table had
    # to cut the pool or fold every time onto three lines.
    out.print(f"attempts{' (none yet)' if not doc['attempts'] else ''}", style="bold")
    for a in doc["attempts"]:
        print_out(
            f"{a['number']:>3}  {a['pool']}  {money(a['price_per_hour'])}/h  {_instances(a)}",
            soft_wrap=True,
            console=out,
        )
        print_out(f"     {_attempt_span(a, now)}", console=out)
    if doc["attempts"]:
        _print_attempt_logs(out, doc["attempts"][-1])
    print_events(out, doc["events"], job_column=False, clock_note=clock_note)


def _instances(a: dict[str, Any]) -> str:
    """A gang's instances in `show`: node 0's id and how many nodes (each is billed)."""
    first = a["instance_id"] or "-"
    n = a.get("nodes") or 1
    return first if n <= 1 else f"{first} (+{max(0, len(a.get('instances') or []) - 1)}, {n} nodes)"


def _attempt_span(a: dict[str, Any], now: datetime) -> str:
    """When it ran, for how long, how it ended and what it cost: '2026-06-01 00:00:05 UTC
    -> 02:10:00 (2h10m)  interrupted  $1.95'."""
    start, end = a["started_at"], a["ended_at"]
    if start is None:
        span = f"requested {when(a['created_at'])}"
    else:
        until = end or now
        ran = _duration((until - start).total_seconds())
        if end is None:
            span = f"{when(start)} -> now ({ran})"
        else:
            same_day = start.astimezone().date() == end.astimezone().date()
            stop = end.astimezone().strftime("%H:%M:%S") if same_day else when(end)
            span = f"{when(start)} -> {stop} ({ran})"
    how = a["end_reason"] or a["state"].lower()
    return f"{span}  {how}  {money(a['cost_usd'])}"


def _duration(seconds: float) -> str:
    """1h05m, 12m30s, 45s: hours and minutes, or minutes and seconds under an hour."""
    s = max(int(seconds), 0)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _print_attempt_logs(out: Console, a: dict[str, Any]) -> None:
    """Where the latest attempt's output is and, when it failed, the end of its stderr."""
    from scheduler.state.read_models import tail

    logs = a["logs"]
    if logs.get("available"):
        # One line whatever the terminal: a path is for copying, not for wrapping.
        print_out(f"logs {logs['dir']}  (spotwise logs JOB)", soft_wrap=True, console=out)
    else:
        print_out(f"logs: {logs['note']}", console=out)
        if logs.get("console_command"):
            print_out(f"console: {logs['console_command']}", console=out)
    failed = a["end_reason"] == "failed" or (a["exit_code"] not in (None, 0, 75))
    if failed and logs.get("available"):
        lines = tail(Path(logs["stderr"]), FAILED_TAIL)
        print_out(
            f"last {len(lines)} lines of stderr (attempt {a['number']}):"
            if lines
            else f"stderr of attempt {a['number']} is empty",
            console=out,
        )
        for line in lines:
            print_out(f"  {line}", console=out)


def print_events(
    out: Console, events: list[dict[str, Any]], *, job_column: bool = True, clock_note: str = ""
) -> None:
    """The audit log as a table; `show` leaves out the JOB column (it is one job's)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"events{clock_note}", title_justify="left")
    columns = ("AT", "JOB", "KIND", "MESSAGE") if job_column else ("AT", "KIND", "MESSAGE")
    for c in columns:
        # Times and ids never wrap (they are read and copied whole); messages fold, long
        # words (pools, paths) included, rather than being cut.
        t.add_column(c, no_wrap=c != "MESSAGE", overflow="fold" if c == "MESSAGE" else "ellipsis")
    for e in events:
        style = {"warning": "yellow", "error": "red"}.get(e["level"], "")
        cells = [Text(when(e["at"])), Text(e["kind"], style=style), Text(e["message"])]
        if job_column:
            cells.insert(1, Text(e["job_id"] or "-"))
        t.add_row(*cells)
    out.print(t)
