"""`spotwise show` (one job: what it asked for, its attempts and why each ended, where its
logs are, its events) and `spotwise events` (the audit log, or a follower of it), and how
both print events.

Readable at 80 columns: one line per event in plain columns (the message is what gets
shortened, at a word; `-o wide` prints it whole), nothing a person copies (ids, pools,
paths) is cut, user text is never taken for Rich markup, and every time is the wall clock
(see common.ScreenClock), as in `status` and in the job's own log lines.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler.cli.columns import Col, layout, lines, rich_lines
from scheduler.cli.common import (
    STATE_STYLE,
    ConfigOpt,
    Format,
    Output,
    OutputOpt,
    ScreenClock,
    StdoutLines,
    WideOutputOpt,
    complete_jobs,
    money,
    open_reads,
    out_console,
    pool_label,
    print_err,
    print_json,
    screen_clock,
    stamp,
    stdout_is_terminal,
    terminal_width,
    unix_user,
    when,
    zone_name,
)

commands = typer.Typer()

FAILED_TAIL = 10  # stderr lines `show` prints for a failed attempt
JobArg = Annotated[
    str,
    typer.Argument(metavar="JOB", help="Job id, id prefix or name", autocompletion=complete_jobs),
]


@commands.command()
def show(job: JobArg, config: ConfigOpt = None, output: OutputOpt = Format.table) -> None:
    """One job: what it asked for, attempts and why each ended, events, cost."""
    from scheduler.cli.remote import target, with_times
    from scheduler.state import read_models

    api = target()
    if api is not None:  # the server shows env values only to the job's team
        doc = api.job_detail(job)
        if output == "json":
            print_json(doc)
            return
        _print_show(with_times(doc), api.screen(), api)
        return
    cfg, db = open_reads(config)
    doc = read_models.job_detail(db, job, cfg)
    spec = doc.get("spec")
    if spec is not None:
        spec["env_visible"] = env_visible_to(doc["job"]["submitted_by"])
        if not spec["env_visible"]:
            spec["env"] = dict.fromkeys(spec.get("env") or {}, "***")
    if output == "json":
        print_json(read_models.document(**doc))
        return
    _print_show(doc, screen_clock(cfg), db)


@commands.command()
def events(
    job: Annotated[
        str | None,
        typer.Option(
            "--job",
            "-j",
            metavar="JOB",
            help="Only this job (id, id prefix or name)",
            autocompletion=complete_jobs,
        ),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            "-k",
            metavar="KIND",
            help="Only events of this kind (repeatable, or a,b; 'attempt_*' for a prefix)",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(metavar="WHEN", help="Only since then: 30m, 2h, 7d ago, or an ISO time"),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", metavar="USER", help="Only what this Unix user asked for"),
    ] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Newest N events")] = 50,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C")
    ] = False,
    interval: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds between reads while following")
    ] = 1.0,
    config: ConfigOpt = None,
    output: WideOutputOpt = Output.table,
) -> None:
    """The audit log: what the daemon decided and why, and who asked."""
    from scheduler.cli.remote import target
    from scheduler.cli.spend import parse_since
    from scheduler.state import read_models

    kinds = [x.strip() for k in kind or [] for x in k.split(",") if x.strip()] or None
    api = target()
    db: Any
    if api is not None:
        screen, db = api.screen(), api
        parse_since(since, screen.daemon_now())  # the same message for a bad --since

        def read(after: int | None = None, n: int = limit) -> list[dict[str, Any]]:
            return api.events(job=job, limit=n, since=since, kind=kinds, user=user, after_id=after)
    else:
        cfg, db = open_reads(config)
        screen = screen_clock(cfg)
        start = parse_since(since, screen.daemon_now()) if since else None

        def read(after: int | None = None, n: int = limit) -> list[dict[str, Any]]:
            return read_models.event_rows(
                db, job, n, since=start, kinds=kinds, actor=user, after_id=after
            )

    rows = read()
    if output == "json" and not follow:
        print_json(read_models.document(events=rows))
        return
    newest = api.newest_event_id if api is not None else (lambda: _newest_id(db))
    printer = EventPrinter(
        screen,
        db,
        job_column=job is None,
        wide=output == "wide",
        json_lines=output == "json",
        follow=follow,
    )
    printer.print(rows, headers=True)
    if not follow:
        return
    last = rows[-1]["id"] if rows else newest()
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(interval)
            new = read(after=last, n=1000)
            if new:
                printer.print(new, headers=False)
                last = new[-1]["id"]


def _newest_id(db: Any) -> int:
    from scheduler.state.read_connection import reading

    with reading(db) as query:
        rows = query("SELECT max(id) FROM event")
    return int(rows[0][0] or 0)


class EventPrinter:
    """Events as one line each: AT (wall clock), JOB, KIND, WHO (when any event has one),
    MESSAGE. The columns are chosen on the first batch and kept, so a follower's lines stay
    aligned; `json_lines` prints one JSON document per event instead (a follower's -o json)."""

    def __init__(
        self,
        screen: ScreenClock,
        db: Any,
        *,
        job_column: bool = True,
        wide: bool = False,
        json_lines: bool = False,
        follow: bool = False,
    ) -> None:
        self.follow = follow
        self.screen = screen
        self.db = db
        self.job_column = job_column
        self.wide = wide
        self.json_lines = json_lines
        self.keep: list[str] | None = None
        self.widths: dict[str, int] = {}
        self.terminal = stdout_is_terminal()
        self.out = out_console() if self.terminal else None  # Rich only where it shows
        self.width = terminal_width()

    def columns(self, rows: list[dict[str, Any]]) -> list[Col]:
        cols = [Col(f"AT ({zone_name()})")]
        if self.job_column:
            cols.append(Col("JOB"))
        cols.append(Col("KIND"))
        if self.keep is not None:
            who = "WHO" in self.keep
        else:  # a follower shows it from the start: who asks may come later
            who = self.follow or any(r.get("actor") for r in rows)
        if who:
            cols.append(Col("WHO", 1))
        cols.append(Col("MESSAGE"))
        return cols

    def cells(self, rows: list[dict[str, Any]]) -> list[dict[str, str]]:
        from scheduler.state.read_models import local_pools

        # A remote command's db is its API server (cli/remote.py), which answers this too.
        finder = getattr(self.db, "local_pools", None)
        ids = [r["job_id"] for r in rows]
        pools = finder(ids) if finder is not None else local_pools(self.db, ids)
        out = []
        at = f"AT ({zone_name()})"
        for e in rows:
            message = e["message"]
            for pool in pools.get(e["job_id"], ()):
                message = message.replace(pool, pool_label("local", pool))
            out.append(
                {
                    at: stamp(self.screen.wall(e["at"])),
                    "JOB": e["job_id"] or "-",
                    "KIND": e["kind"],
                    "WHO": e.get("actor") or "-",
                    "MESSAGE": " ".join(message.split()),
                    "_level": e["level"],
                }
            )
        return out

    def print(self, rows: list[dict[str, Any]], *, headers: bool) -> None:
        if self.json_lines:
            from scheduler.state.read_models import json_default

            for e in rows:
                sys.stdout.write(json.dumps(e, default=json_default, sort_keys=True) + "\n")
            sys.stdout.flush()
            return
        if not rows and headers:
            print_err("no events" + ("" if self.keep is None else " yet"))
        cols = self.columns(rows)
        cells = self.cells(rows)
        lay = layout(
            cols,
            cells,
            self.width,
            shrink=(("MESSAGE", 40), ("MESSAGE", 12)),
            wide=self.wide,
            keep=self.keep,
        )
        if self.keep is None:
            self.keep = lay.names
            self.widths = dict(lay.widths)
        else:  # a follower's later lines: the first batch's widths, growing only
            widths = {k: max(v, self.widths.get(k, 0)) for k, v in lay.widths.items()}
            if self.width is not None and not self.wide:
                fixed = sum(v for k, v in widths.items() if k != "MESSAGE")
                widths["MESSAGE"] = max(12, self.width - fixed - 2 * (len(widths) - 1))
            lay = type(lay)(lay.cols, widths)
        if self.terminal:
            styles = {"KIND": {c["KIND"]: _LEVEL_STYLE.get(c["_level"], "") for c in cells}}
            out = self.out or out_console()
            for text in rich_lines(lay, cells, headers=headers and bool(rows), styles=styles):
                out.print(text, soft_wrap=True)
        else:
            for line in lines(lay, cells, headers=headers and bool(rows)):
                sys.stdout.write(line + "\n")
            sys.stdout.flush()


_LEVEL_STYLE = {"warning": "yellow", "error": "red"}


def _print_show(doc: dict[str, Any], screen: ScreenClock, db: Any) -> None:
    """What the job asked for, its attempts (two lines each: where and at what price; when,
    how long, how it ended and why, what it cost), where its logs are and its events."""
    out = StdoutLines()
    j = doc["job"]
    by = f", by {j['submitted_by']})" if j.get("submitted_by") else ")"
    if out.terminal:
        from rich.text import Text

        head = Text()
        head.append(j["id"], style="bold")
        head.append(f" {j['name']} (team {j['team']}{by}  ")
        head.append(j["state"], style=STATE_STYLE.get(j["state"], "bold"))
        out.console.print(head, soft_wrap=True)
    else:
        out.print(f"{j['id']} {j['name']} (team {j['team']}{by}  {j['state']}", soft_wrap=True)
    reason = j["reason"] or "-"
    for a in doc["attempts"]:  # the local market's pools say so, as everywhere else
        if a["provider"] == "local" and a["pool"]:
            reason = reason.replace(a["pool"], pool_label("local", a["pool"]))
    out.print(f"reason: {reason}", soft_wrap=True)
    out.print(
        f"cost {money(j['cost_usd'])}  recoveries {j['recoveries']}  "
        f"created {when(screen.wall(j['created_at']))}",
    )
    for line in spec_lines(doc.get("spec"), screen):
        out.print(line, soft_wrap=True)  # a command is copied whole
    out.print(f"checkpoint {j['checkpoint_uri']}", soft_wrap=True)
    out.print(f"attempts{' (none yet)' if not doc['attempts'] else ''}", style="bold")
    for a in doc["attempts"]:
        pool = pool_label(a["provider"], a["pool"])
        nodes = a.get("nodes") or 1
        price = money(a["price_per_hour"] * nodes) + "/h"
        if nodes > 1:
            price += f" ({nodes} x {money(a['price_per_hour'])})"
        out.print(f"{a['number']:>3}  {pool}  {price}  {_instances(a)}", soft_wrap=True)
        out.print(f"     {_attempt_span(a, screen)}")
        out.print(f"     {attempt_reason(a, screen)}", soft_wrap=True)
    if doc["attempts"]:
        _print_attempt_logs(out, doc["attempts"][-1])
    if note := screen.note():
        out.print(note)
    out.print("events", style="bold")
    EventPrinter(screen, db, job_column=False).print(doc["events"], headers=True)


def spec_lines(spec: dict[str, Any] | None, screen: ScreenClock) -> list[str]:
    """What the job asked for, in a few lines: GPUs and nodes, the estimate, the market,
    the deadline and price cap, its command; its env only to its submitter (and root)."""
    if not spec:
        return []
    gpus = " or ".join(spec.get("gpus") or ["any:1"])
    nodes = spec.get("nodes") or 1
    parts = [f"gpus {gpus}" + (f" x {nodes} nodes" if nodes > 1 else "")]
    if spec.get("gpu_hours"):
        parts.append(f"{spec['gpu_hours']:g} GPU-hours")
    parts.append(f"spot {spec.get('spot', 'prefer')}")
    if spec.get("max_price_per_hour"):
        parts.append(f"max ${spec['max_price_per_hour']:g}/h")
    deadline = spec.get("deadline_at")
    if deadline:
        parts.append(f"deadline {when(screen.wall(_parse_time(deadline)))}")
    where_ = [*(spec.get("clouds") or []), *(spec.get("regions") or [])]
    if where_:
        parts.append("in " + ",".join(where_))
    out = ["asked: " + ", ".join(parts)]
    out.append("command: " + " ".join(_quoted(a) for a in spec.get("command") or []))
    env = spec.get("env") or {}
    if env:
        if spec.get("env_visible"):
            out.append("env: " + " ".join(f"{k}={_quoted(v)}" for k, v in sorted(env.items())))
        else:
            names = ", ".join(sorted(env))
            out.append(f"env: {names} (values shown to its submitter and root)")
    return out


def _parse_time(value: datetime | str) -> datetime:
    t = (
        value
        if isinstance(value, datetime)
        else datetime.fromisoformat(value.replace("Z", "+00:00"))
    )
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _quoted(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _instances(a: dict[str, Any]) -> str:
    """A gang's instances in `show`: node 0's id and how many nodes (each is billed)."""
    first = a["instance_id"] or "-"
    n = a.get("nodes") or 1
    return first if n <= 1 else f"{first} (+{max(0, len(a.get('instances') or []) - 1)}, {n} nodes)"


def _attempt_span(a: dict[str, Any], screen: ScreenClock) -> str:
    """When it ran (wall clock), for how long, and what it cost: '2026-06-01 00:00:05 UTC
    -> 02:10:00 (2h10m)  $1.95'."""
    start, end = screen.wall(a["started_at"]), screen.wall(a["ended_at"])
    if start is None:
        span = f"requested {when(screen.wall(a['created_at']))}"
        if end is not None:
            span += f", ended {_clock_time(end)}"
    else:
        until = end or datetime.now(UTC)
        ran = _duration((until - start).total_seconds())
        if end is None:
            span = f"{when(start)} -> now ({ran})"
        else:
            same_day = start.astimezone().date() == end.astimezone().date()
            stop = _clock_time(end) if same_day else when(end)
            span = f"{when(start)} -> {stop} ({ran})"
    return f"{span}  {money(a['cost_usd'])}"


def _clock_time(t: datetime) -> str:
    return t.astimezone().strftime("%H:%M:%S")


_STOPPED_BY = {
    "cancel": "stopped: cancelled by its user",
    "budget": "stopped by a hard budget; the job is held",
    "policy": "moved by its deadline policy",
    "price": "moved to a clearly cheaper pool (migrate = on-price)",
    "launch_timeout": "no instance within launch_timeout",
    "launch_failed": "the launch failed",
    "peer": "another node of its gang was taken back",
    "quarantine": "stopped: the job's reconcile step kept failing",
}
_ENDED = {
    "finished": "finished: DONE in the checkpoint store",
    "failed": "failed: the job's command exited non-zero",
    "interrupted": "interrupted: the cloud took it back",
    "cancelled": "cancelled by its user",
    "budget": "stopped by a hard budget; the job is held",
    "migrated": "moved to a better offering",
    "launch_failed": "launch failed (capacity or quota)",
    "rejected": "rejected by the cloud",
    "lost": "lost: vanished with no outcome",
}


def attempt_reason(a: dict[str, Any], screen: ScreenClock | None = None) -> str:
    """Why an attempt ended, or what it is doing, in words: every attempt has one. With
    `screen`, an interruption says when its notice came (wall clock)."""
    end = a.get("end_reason")
    code = a.get("exit_code")
    exit_text = f" (exit {code})" if code is not None else ""
    notice = a.get("notice_at")
    noticed = ""
    if notice is not None and screen is not None:
        noticed = f", notice at {_clock_time(screen.wall(_parse_time(notice)) or notice)}"
    if end is None:
        state = (a.get("state") or "").upper()
        if state == "STOPPING":
            return "stopping: " + _STOPPED_BY.get(a.get("stop_reason") or "", "stop requested")
        if state == "RUNNING":
            return "running" + (": interruption notice received" if notice else "")
        return "launching: waiting for the instance"
    if a.get("stop_reason") in _STOPPED_BY and end not in ("finished", "failed"):
        why = _STOPPED_BY[a["stop_reason"]]
    elif end == "failed" and code is not None:
        why = f"failed: the job's command exited with code {code}"
        exit_text = ""
    else:
        why = _ENDED.get(end, end)
        if end == "interrupted":
            why += noticed
    detail = " ".join((a.get("detail") or "").split())
    return f"{why}{exit_text}" + (f": {detail}" if detail and detail not in why else "")


def _duration(seconds: float) -> str:
    """1h05m, 12m30s, 45s: hours and minutes, or minutes and seconds under an hour."""
    s = max(int(seconds), 0)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _print_attempt_logs(out: StdoutLines, a: dict[str, Any]) -> None:
    """Where the latest attempt's output is and, when it failed, the end of its stderr."""
    from scheduler.state.read_models import tail

    logs = a["logs"]
    if logs.get("available"):
        # One line whatever the terminal: a path is for copying, not for wrapping.
        out.print(f"logs {logs['dir']}  (spotwise logs JOB)", soft_wrap=True)
    else:
        out.print(f"logs: {logs['note']}")
        if logs.get("console_command"):
            out.print(f"console: {logs['console_command']}")
    failed = a["end_reason"] == "failed" or (a["exit_code"] not in (None, 0, 75))
    if failed and logs.get("available"):
        lines_ = tail(Path(logs["stderr"]), FAILED_TAIL)
        out.print(
            f"last {len(lines_)} lines of stderr (attempt {a['number']}):"
            if lines_
            else f"stderr of attempt {a['number']} is empty",
        )
        for line in lines_:
            out.print(f"  {line}")


def env_visible_to(submitted_by: str) -> bool:
    """A job's env values (tokens, keys) are shown to the Unix user who submitted it and to
    root; others see the names."""
    import os

    return os.geteuid() == 0 or (bool(submitted_by) and submitted_by == unix_user())
