"""What was spent: `spotwise budget` (each budget against its limit), `cost` (spend grouped
by team, job, cloud or day) and `report` (spend against the cheapest adequate on-demand,
as a table, JSON or a self-contained HTML page).

All three read the hourly spend the budgets use, so their figures always agree.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler.cli.columns import Col, layout, lines
from scheduler.cli.common import (
    ConfigOpt,
    Format,
    OutputOpt,
    money,
    open_engine,
    out_console,
    print_err,
    print_json,
    screen_clock,
    stamp,
    terminal_width,
    when,
)
from scheduler.core.read_settings import ReadSettings

commands = typer.Typer()


# Every budget's name, scope, kind, limit and state whole at 80 columns: the window goes
# with the limit ($500.00/month); burn and projection give way first.
BUDGET_COLUMNS = (
    Col("NAME"),
    Col("SCOPE"),
    Col("KIND"),
    Col("LIMIT", right=True),
    Col("SPENT", right=True),
    Col("BURN/H", 2, right=True),
    Col("PROJECTED", 1, right=True),
    Col("LIMIT AT", 3),
    Col("STATE"),
)


@commands.command()
def budget(config: ConfigOpt = None, output: OutputOpt = Format.table) -> None:
    """Each budget the daemon enforces: limit, window, spent, projected, state."""
    from scheduler.cli.remote import target, with_times
    from scheduler.state import read_models

    api = target()
    if api is not None:
        rows = with_times(api.get("/budgets")["budgets"])
        screen = api.screen() if output != "json" else None
    else:
        cfg, engine = open_engine(config, warn=output != "json")
        screen = screen_clock(ReadSettings.of_config(cfg))
        rows = read_models.budget_rows(engine, cfg, screen.daemon_now())
    if output == "json":
        print_json(read_models.document(budgets=rows))
        return
    if not rows:
        print_err("no budgets configured ([[budgets]] in the daemon's config)")
        return
    cells = [
        {
            "NAME": r["name"],
            "SCOPE": r["scope"],
            "LIMIT": f"{money(r['limit_usd'])}/{r['window']}",
            "KIND": "hard" if r["hard"] else "soft",
            "SPENT": money(r["spent_usd"]),
            "BURN/H": money(r["burn_per_hour"]),
            "PROJECTED": money(r["projected_usd"]),
            # The daemon's clock runs ahead on a sped-up local market: said in wall time.
            "LIMIT AT": stamp(screen.wall(r["forecast_at"]) if screen else r["forecast_at"]),
            "STATE": r["state"],
        }
        for r in rows
    ]
    width = terminal_width()
    for line in lines(layout(BUDGET_COLUMNS, cells, width), cells):
        sys.stdout.write(line + "\n")
    print_err(
        "PROJECTED: spend at the window's end if BURN/H goes on (none for a total window); "
        "LIMIT AT: when the limit is reached at that rate, if within the window"
    )


def parse_since(text: str | None, now: datetime) -> datetime | None:
    """'7d' (back from now) or an ISO time; None for no bound."""
    if not text:
        return None
    from providers.settings import parse_duration
    from scheduler.core.errors import UserError

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


@commands.command()
def cost(
    by: Annotated[CostBy, typer.Option("--by", help="team, job, cloud or day")] = CostBy.team,
    since: Annotated[str | None, typer.Option(help="7d, 12h or an ISO time")] = "30d",
    until: Annotated[str | None, typer.Option(help="ISO time or duration ago")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """What was spent, by team, job, cloud or day (the hourly spend budgets use)."""
    from scheduler.cli.remote import target, with_times
    from scheduler.state import read_models

    api = target()
    if api is not None:
        parse_since(since, datetime.now(UTC)), parse_since(until, datetime.now(UTC))
        query = {"by": by.value, "since": since or "", **({"until": until} if until else {})}
        got = with_times(api.get("/cost", query))
        start, end, rows = got["since"], got["until"], got["costs"]
    else:
        cfg, engine = open_engine(config, warn=output != "json")
        now = screen_clock(ReadSettings.of_config(cfg)).daemon_now()
        start, end = parse_since(since, now), parse_since(until, now)
        rows = read_models.cost_rows(engine, by.value, start, end)
    total = round(sum(r["cost_usd"] for r in rows), 6)
    if output == "json":
        print_json(
            read_models.document(by=by.value, since=start, until=end, total_usd=total, costs=rows)
        )
        return
    span = f"since {when(start)}" if start else "all time"
    key = by.value.upper()
    cols = [Col(key), *([Col("NAME")] if by is CostBy.job else []), Col("JOBS", right=True),
            Col("COST", right=True)]  # fmt: skip
    cells = [
        {
            key: r[by.value],
            "NAME": r.get("name", ""),
            "JOBS": str(r["jobs"]),
            "COST": money(r["cost_usd"]),
        }
        for r in rows
    ]
    cells.append({key: "total", "NAME": "", "JOBS": "", "COST": money(total)})
    print_err(f"cost by {by.value}, {span}")
    for line in lines(layout(cols, cells, terminal_width(), shrink=(("NAME", 12),)), cells):
        sys.stdout.write(line + "\n")


class ReportBy(StrEnum):
    job = "job"
    team = "team"
    cloud = "cloud"


@commands.command()
def report(
    since: Annotated[str | None, typer.Option(help="7d, 12h or an ISO time; '' for all")] = "30d",
    until: Annotated[str | None, typer.Option(help="ISO time or duration ago")] = None,
    by: Annotated[ReportBy, typer.Option("--by", help="job, team or cloud")] = ReportBy.team,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML report")
    ] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """Spend against the cheapest adequate on-demand, savings, interruptions, GPU-hours."""
    from scheduler.cli.remote import target

    api = target()
    if api is not None:
        from scheduler.cli.remote_report import print_remote_report

        print_remote_report(
            api, by.value, since, until, html is not None, output == "json", _print_report
        )
        return
    from scheduler.daemon.wiring import build_providers
    from scheduler.state import read_models
    from scheduler.state import report as rep

    cfg, engine = open_engine(config, warn=output != "json")
    now = screen_clock(ReadSettings.of_config(cfg)).daemon_now()
    start, end = parse_since(since, now), parse_since(until, now)
    rules = cfg.budget_rules()
    facts = rep.load(engine, start, end, now, rules, cfg.policy.spot_interruption_prior)
    offerings, problems = rep.ondemand_offerings(build_providers(cfg, read_only=True))
    doc = rep.build(facts, offerings, rules, by.value, since=start, until=end, problems=problems)
    if html is not None:
        from scheduler.cli.report_html import render

        _write_text(html, render(doc))
        print_err(f"wrote {html}")
    if output == "json":
        print_json(read_models.document(**doc.to_dict()))
        return
    _print_report(doc)


def _write_text(path: Path, text: str) -> None:
    from scheduler.core.errors import UserError

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def _print_report(doc: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    by = doc.by
    span = f"since {when(doc.window.start)}" if doc.window.start else "all time"
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
            money(r.cost_usd),
            money(r.ondemand_usd),
            money(r.savings_usd),
            "-" if pct is None else f"{pct:.1f}%",
            str(r.interruptions),
            f"{r.hours:,.2f}",
            f"{r.lost_hours:,.2f}",
            f"{r.gpu_hours:,.2f}",
        ]

    rows = [cells(r, False) for r in doc.rows] + [cells(doc.total, True)]
    # As `status` does: drop the lower-value columns until the table fits the terminal
    # rather than shorten every cell (-o json keeps every figure; piped output keeps all).
    limit = terminal_width()
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
    out = out_console()
    out.print(t, width=limit)
    for note in doc.notes:
        out.print(Text(f"* {note}"), width=min(limit or 100, 100))
