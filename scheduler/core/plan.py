"""The offer plan `spotwise submit --dry-run` prints: what placement would choose now, the
next alternatives, and why each other kind of offering is out.

Pure, and built on the placement the daemon runs (`placement.place`, `candidates`,
`expected_cost` over the same catalog and context), so the plan is the daemon's decision,
not a second opinion; what is added is only the explaining: each GPU shape the job accepts
is taken market by market through the same filters in turn (listed at all, the job's
clouds and regions, its price cap, pools out of capacity, budget headroom), and the first
filter that leaves nothing is the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from providers.base import Market, Offering
from scheduler.core.catalog import Catalog
from scheduler.core.jobspec import GpuSpec, SpotPreference
from scheduler.core.placement import (
    Decision,
    PlacementContext,
    Requirements,
    candidates,
    expected_cost,
    place,
    requirement_rows,
)


@dataclass(frozen=True, slots=True)
class Option:
    """An adequate offering and what it is expected to cost: to finish when the job gives
    `gpu_hours`, else for one hour."""

    offering: Offering
    expected_usd: float
    nodes: int


@dataclass(frozen=True, slots=True)
class Excluded:
    """A kind of offering the job accepts that it cannot have now, and why."""

    what: str  # "T4:1 spot"
    why: str  # "none listed now"


@dataclass(frozen=True, slots=True)
class Plan:
    decision: Decision
    options: list[Option]  # the chosen one first, then the next best, one per pool
    excluded: list[Excluded]
    to_finish: bool  # expected_usd is the cost to finish (else per hour)


def plan(req: Requirements, cat: Catalog, ctx: PlacementContext, *, alternatives: int = 3) -> Plan:
    """The daemon's decision for `req` now, up to `alternatives` next-best offerings (one
    per pool) and the reason for every GPU shape and market that is out."""
    decision = place(req, cat, ctx)
    options: list[Option] = []
    if decision.offering is not None:
        rows, _ = candidates(req, cat, ctx, nodes=decision.nodes)
        cost = expected_cost(cat, rows, ctx, nodes=decision.nodes)
        order = np.argsort(cost, kind="stable")
        chosen = decision.offering.pool
        first = Option(decision.offering, float(decision.expected_cost or 0.0), decision.nodes)
        options.append(first)
        seen = {chosen}
        for i in order:
            o = cat.offering(rows[i])
            if o.pool in seen:
                continue
            seen.add(o.pool)
            options.append(Option(o, float(cost[i]), decision.nodes))
            if len(options) > alternatives:
                break
    shown = {o.offering.pool for o in options}
    excluded = []
    for g in req.gpus:
        for market in (Market.SPOT, Market.ON_DEMAND):
            why = _why_out(req, g, market, cat, ctx, shown, decision.nodes)
            if why:
                excluded.append(Excluded(f"{_shape(g)} {market.value}", why))
    return Plan(decision, options, excluded, to_finish=bool(ctx.remaining_gpu_hours))


def _shape(g: GpuSpec) -> str:
    what = f"{g.model or 'any'}:{g.count}"
    return f"{what} (>= {g.min_memory_gb:g} GB)" if g.min_memory_gb else what


def _why_out(
    req: Requirements,
    g: GpuSpec,
    market: Market,
    cat: Catalog,
    ctx: PlacementContext,
    shown: set[str],
    nodes: int,
) -> str:
    """Why offerings of shape `g` in `market` are not taken now: the first filter that
    leaves none, or 'dearer' when some are adequate but none is among the `shown` pools
    ('' when one is shown)."""
    if req.spot is SpotPreference.NEVER and market is Market.SPOT:
        return "the job says spot = never"
    if req.spot is SpotPreference.ONLY and market is Market.ON_DEMAND:
        return "the job says spot = only"
    only = SpotPreference.ONLY if market is Market.SPOT else SpotPreference.NEVER
    one = replace(req, gpus=(g,), spot=only)
    bare = replace(one, clouds=frozenset(), regions=frozenset(), max_price_per_hour=None)
    rows, _ = requirement_rows(bare, cat)
    if len(rows) == 0:
        return "none listed now"
    placed_rows, _ = requirement_rows(replace(one, max_price_per_hour=None), cat)
    if len(placed_rows) == 0:
        where = ", ".join(sorted(req.clouds | req.regions))
        return f"none listed in {where}"
    priced, _ = requirement_rows(one, cat)
    if len(priced) == 0:
        cheapest = float(cat.price[placed_rows].min()) * req.nodes
        return f"over max_price_per_hour ${req.max_price_per_hour:g}/h (cheapest ${cheapest:.2f}/h)"
    free, reason = candidates(one, cat, replace(ctx, max_affordable_price=None))
    if len(free) == 0:
        return reason
    affordable, _ = candidates(one, cat, ctx)
    if len(affordable) == 0:
        cheapest = float(cat.price[free].min()) * req.nodes
        return (
            f"budget {ctx.budget_name} would be exceeded "
            f"(${cheapest:.2f}/h > ${ctx.max_affordable_price or 0.0:.2f}/h)"
        )
    codes = cat.pools.codes_of(shown)
    if len(codes) and np.isin(cat.pool[affordable], codes).any():
        return ""
    best = float(expected_cost(cat, affordable, ctx, nodes=max(nodes, 1)).min())
    unit = "to finish" if ctx.remaining_gpu_hours else "an hour"
    return f"dearer: expected ${best:.2f} {unit}"
