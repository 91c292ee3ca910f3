"""`spotwise submit --dry-run FILE`: the plan before spending, written nowhere.

What the daemon would do with the job now, from what the daemon would see: its recorded
configuration (budgets, teams, providers), the offerings its providers list now (asked
read-only, as `prices` asks), and, when its database exists, the pool states, interruption
rates and budget spend the daemon's own pass reads (`read_facts`, the same code), so the
choice is the daemon's placement's (scheduler.core.plan explains it). Nothing is written:
no job, no event, no file under the state directory.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.cli.columns import Col, layout, lines
from scheduler.cli.common import (
    Format,
    daemon_config,
    money,
    pool_label,
    print_err,
    print_json,
    print_out,
    remember_database_urls,
    terminal_width,
)

if TYPE_CHECKING:
    from providers.base import Offering
    from scheduler.core.config import Config
    from scheduler.core.jobspec import JobSpec
    from scheduler.core.plan import Plan

# The pool ends in its market (/spot, /on-demand): no MARKET column, so a long Azure pool
# and its prices still fit 80 columns.
OPTION_COLUMNS = (
    Col("POOL"),
    Col("$/H", right=True),
    Col("EXPECTED", right=True),
)


def dry_run(job_file: Path, given: Path | None, output: Format) -> None:
    """Validate the job as `submit` does, then print the plan; exit 2 on a bad file."""
    from sqlmodel import Session

    from scheduler.core.budget import BudgetStatus
    from scheduler.core.catalog import Catalog
    from scheduler.core.config import check_team
    from scheduler.core.errors import UserError
    from scheduler.core.placement import Requirements, rate_column
    from scheduler.core.plan import plan
    from scheduler.daemon.controllers.base import CatalogHolder
    from scheduler.daemon.controllers.job.snapshot import PassFacts, read_facts
    from scheduler.daemon.controllers.spend import SpendController
    from scheduler.daemon.wiring import clock_for
    from scheduler.state.db import open_existing
    from scheduler.state.files import load_config, load_jobspec
    from scheduler.state.models import Job

    spec = load_jobspec(job_file)
    own = load_config(given)
    remember_database_urls()
    try:
        engine = open_existing(own.daemon.resolved_database_url())
    except UserError:
        engine = None  # no daemon has run here yet: no spend, no pool history
    cfg = daemon_config(own, engine, given, warn=output == "table") if engine else own
    clock = clock_for(cfg, read_only=True)
    now = clock.now()
    spec.validate_for_submit(now, source=str(job_file))
    check_team(spec, cfg, source=str(job_file))
    offers, provider_of, problems = _offerings(cfg)
    holder = CatalogHolder()
    holder.set(Catalog(offers), provider_of)
    spend = SpendController(None, clock, holder, lambda: cfg)  # type: ignore[arg-type]
    if engine is not None:
        with Session(engine) as s:
            facts = read_facts(s, now, cfg, holder, spend)
    else:
        cat = holder.catalog
        facts = PassFacts(
            now=now,
            unavailable={},
            rates={},
            rate_by_row=rate_column(cat, {}, cfg.policy.spot_interruption_prior),
            statuses=[BudgetStatus(r, 0.0, 0.0) for r in cfg.budget_rules()],
            hold_hours=spend.hold_hours(),
            catalog=cat,
        )
    job = Job(
        id="dry-run",
        name=spec.name,
        team=spec.team,
        spec_json="{}",
        checkpoint_uri="",
        created_at=now,
        updated_at=now,
    )
    ctx = facts.placement_context(job, spec, now, cfg.policy.restart_overhead)
    result = plan(Requirements.from_spec(spec), facts.catalog, ctx)
    budgets = [
        {
            "name": st.rule.name,
            "scope": st.rule.scope,
            "hard": st.rule.hard,
            "limit_usd": st.rule.limit_usd,
            "spent_usd": round(st.spent, 6),
            "burn_per_hour": round(st.burn_per_hour, 6),
        }
        for st in facts.statuses
        if st.rule.applies_to(spec.name, spec.team)
    ]
    for p in problems:
        print_err(f"warning: {p}")
    if output == "json":
        from scheduler.state.read_models import document

        print_json(document(**_plan_doc(spec, job_file, result, budgets, provider_of, now)))
        return
    _print_plan(spec, job_file, result, budgets, provider_of)


def _offerings(cfg: Config) -> tuple[list[Offering], dict[str, str], list[str]]:
    """Every offering the daemon's providers list now (read-only), which provider sells
    each pool, and each provider that could not answer."""
    from scheduler.daemon.wiring import build_providers

    offers: list[Offering] = []
    provider_of: dict[str, str] = {}
    problems: list[str] = []
    for name, provider in build_providers(cfg, read_only=True).items():
        try:
            listed = provider.offerings()
        except Exception as e:
            problems.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        for o in listed:
            offers.append(o)
            provider_of[o.pool] = name
    return offers, provider_of, problems


def _spec_summary(spec: JobSpec) -> str:
    parts = [f"gpus {' or '.join(spec.gpus)}"]
    if spec.nodes > 1:
        parts[0] += f" x {spec.nodes} nodes"
    parts.append(f"{spec.gpu_hours:g} GPU-hours" if spec.gpu_hours else "no gpu_hours estimate")
    parts.append(f"spot {spec.spot.value}")
    if spec.max_price_per_hour:
        parts.append(f"max ${spec.max_price_per_hour:g}/h")
    if spec.deadline is not None:
        parts.append("a deadline (its policy may move it between markets)")
    if spec.clouds or spec.regions:
        parts.append("in " + ",".join([*spec.clouds, *spec.regions]))
    return ", ".join(parts)


def _print_plan(
    spec: JobSpec,
    source: Path,
    result: Plan,
    budgets: list[dict[str, Any]],
    provider_of: dict[str, str],
) -> None:
    import shlex

    print_out(f"{source}: a valid job file: {spec.name} (team {spec.team})", soft_wrap=True)
    print_out(f"  asked: {_spec_summary(spec)}", soft_wrap=True)
    print_out(f"  command: {shlex.join(spec.command)}", soft_wrap=True)
    unit = "to finish" if result.to_finish else "an hour"
    d = result.decision
    if d.offering is None:
        print_out(f"would wait: {d.reason}", soft_wrap=True)
    else:
        o = d.offering
        n = d.nodes
        price = money(o.price_per_hour * n)
        pool = pool_label(provider_of.get(o.pool), o.pool)
        print_out(
            f"would take {pool} at {price}/h" + (f" ({n} nodes)" if n > 1 else ""), soft_wrap=True
        )
        print_out(
            f"  expected {money(result.options[0].expected_usd)} {unit} "
            "(interruptions and restarts included)"
        )
        if len(result.options) > 1:
            print_out("next best:")
            cells = [
                {
                    "POOL": pool_label(provider_of.get(x.offering.pool), x.offering.pool),
                    "$/H": money(x.offering.price_per_hour * x.nodes),
                    "EXPECTED": money(x.expected_usd),
                }
                for x in result.options[1:]
            ]
            width = terminal_width()
            for line in lines(layout(OPTION_COLUMNS, cells, width and width - 2), cells):
                print_out(f"  {line}", soft_wrap=True)
    if result.excluded:
        print_out("not taken:")
        for x in result.excluded:
            print_out(f"  {x.what}: {x.why}", soft_wrap=True)
    if budgets:
        print_out("draws on:")
        for b in budgets:
            kind = "hard" if b["hard"] else "soft"
            print_out(
                f"  budget {b['name']} ({b['scope']}, {kind}): {money(b['spent_usd'])} of "
                f"{money(b['limit_usd'])} spent",
                soft_wrap=True,
            )
    else:
        print_out("draws on: no budget covers this job")
    print_err("dry run: nothing was submitted or written")


def _plan_doc(
    spec: JobSpec,
    source: Path,
    result: Plan,
    budgets: list[dict[str, Any]],
    provider_of: dict[str, str],
    now: datetime,
) -> dict[str, Any]:
    def offer(x: Any) -> dict[str, Any]:
        o = x.offering
        return {
            "provider": provider_of.get(o.pool),
            "pool": o.pool,
            "cloud": o.cloud,
            "region": o.region,
            "zone": o.zone,
            "instance_type": o.instance_type,
            "market": o.market.value,
            "nodes": x.nodes,
            "price_per_hour": o.price_per_hour * x.nodes,
            "expected_usd": round(x.expected_usd, 6),
        }

    d = result.decision
    return {
        "file": str(source),
        "dry_run": True,
        "spec": spec.model_dump(mode="json"),
        "placed": d.offering is not None,
        "reason": d.reason,
        "expected_cost_is": "to_finish" if result.to_finish else "per_hour",
        "choice": offer(result.options[0]) if result.options else None,
        "alternatives": [offer(x) for x in result.options[1:]],
        "not_taken": [{"what": x.what, "why": x.why} for x in result.excluded],
        "budgets": budgets,
        "at": now,
    }
