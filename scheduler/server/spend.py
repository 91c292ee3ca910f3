"""The API's money routes: budget, cost, report and prices, as their commands print them
with `-o json`.

A member or viewer sees what concerns its teams: the global budgets, its teams' and its
own (`user:NAME`), and the spend and report of its teams' jobs only; an admin sees all.
Prices are the providers' offerings now (the same for everyone), kept a minute.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from starlette.requests import Request

from scheduler.server.common import context, json_response, principal, since_time, visible
from scheduler.server.context import PRICES_SECONDS
from scheduler.state.accounts import Principal

router = APIRouter(prefix="/api/v1", tags=["spend"])
Caller = Annotated[Principal, Depends(principal)]


def budget_visible(p: Principal, scope: str) -> bool:
    if p.admin or scope == "global":
        return True
    kind, _, value = scope.partition(":")
    return (kind == "team" and value in p.teams) or (kind == "user" and value == p.name)


def budget_doc(request: Request, p: Principal) -> dict[str, Any]:
    from scheduler.state import read_models

    ctx = context(request)
    rows = read_models.budget_rows(ctx.engine, ctx.config(), ctx.now())
    return read_models.document(budgets=[r for r in rows if budget_visible(p, r["scope"])])


@router.get("/budgets", summary="budget: each budget's limit, spend, projection and forecast")
def budgets(request: Request, p: Caller) -> Any:
    return json_response(budget_doc(request, p))


@router.get("/cost", summary="cost: what was spent, by team, job, cloud or day")
def cost(
    request: Request,
    p: Caller,
    by: Annotated[str, Query(pattern="^(team|job|cloud|day)$")] = "team",
    since: Annotated[str | None, Query(max_length=64)] = "30d",
    until: Annotated[str | None, Query(max_length=64)] = None,
) -> Any:
    from scheduler.state import read_models

    ctx = context(request)
    now = ctx.now()
    start, end = since_time(since, now), since_time(until, now, "until")
    rows = read_models.cost_rows(ctx.engine, by, start, end, teams=visible(p))
    total = round(sum(r["cost_usd"] for r in rows), 6)
    return json_response(
        read_models.document(by=by, since=start, until=end, total_usd=total, costs=rows)
    )


def report_doc(
    request: Request, p: Principal, by: str, since: str | None, until: str | None
) -> dict[str, Any]:
    from scheduler.state import read_models
    from scheduler.state import report as rep

    ctx = context(request)
    cfg = ctx.config()
    now = ctx.now()
    start, end = since_time(since, now), since_time(until, now, "until")
    rules = cfg.budget_rules()
    facts = rep.load(ctx.engine, start, end, now, rules)
    teams = visible(p)
    if teams is not None:
        facts.attempts = [a for a in facts.attempts if a.team in teams]
        facts.buckets = [b for b in facts.buckets if b.team in teams]
        rules = [r for r in rules if budget_visible(p, r.scope)]
    offerings, problems = ctx.cached(
        "ondemand", PRICES_SECONDS, lambda: rep.ondemand_offerings(ctx.providers())
    )
    doc = rep.build(facts, offerings, rules, by, since=start, until=end, problems=problems)
    return read_models.document(**doc.to_dict())


@router.get("/report", summary="report: spend against on-demand, savings, interruptions")
def report(
    request: Request,
    p: Caller,
    by: Annotated[str, Query(pattern="^(job|team|cloud)$")] = "team",
    since: Annotated[str | None, Query(max_length=64)] = "30d",
    until: Annotated[str | None, Query(max_length=64)] = None,
) -> Any:
    return json_response(report_doc(request, p, by, since, until))


def prices_doc(
    request: Request, gpu: str | None, cloud: str | None, market: str | None
) -> dict[str, Any]:
    from scheduler.state import read_models

    ctx = context(request)

    def ask() -> tuple[list[dict[str, Any]], list[str]]:
        from scheduler.state.pool_hazards import annotate

        providers = ctx.providers()
        rows, problems = read_models.live_offerings(providers, gpu=gpu, cloud=cloud, market=market)
        if rows:  # each pool's hazard, as `prices -o json` and `-o wide` print it
            prior = ctx.config().policy.spot_interruption_prior
            problems += annotate(rows, providers, ctx.db, prior)
        return rows, problems

    rows, problems = ctx.cached(f"prices:{gpu}:{cloud}:{market}", PRICES_SECONDS, ask)
    return read_models.document(offerings=rows, errors=problems)


@router.get("/prices", summary="prices: the offerings the daemon's providers list, cheapest first")
def prices(
    request: Request,
    p: Caller,
    gpu: Annotated[str | None, Query(max_length=32)] = None,
    cloud: Annotated[str | None, Query(max_length=32)] = None,
    market: Annotated[str | None, Query(pattern="^(spot|on-demand)$")] = None,
) -> Any:
    return json_response(prices_doc(request, gpu, cloud, market))
