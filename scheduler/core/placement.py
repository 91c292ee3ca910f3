"""Placement: a pure function from (requirements, catalog, context) to a Decision.

No I/O and no clock reads: the daemon, the tests and the replay simulator call the very same
code. The objective is the lowest *expected* cost to finish, not the lowest list price: a spot
pool that is interrupted often costs restarts and lost work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from providers.base import Market, Offering
from scheduler.core.catalog import Catalog
from scheduler.core.jobspec import GpuSpec, JobSpec, SpotPreference

# Prior spot interruption rate (per hour) before a pool has history: roughly the median of the
# public AWS V100 traces (one loss every ~5-10 h). Learned rates replace it as data arrives.
DEFAULT_SPOT_INTERRUPTION_RATE = 0.1


@dataclass(frozen=True, slots=True)
class Requirements:
    gpus: tuple[GpuSpec, ...]
    cpus: float = 0.0
    memory_gb: float = 0.0
    clouds: frozenset[str] = frozenset()
    regions: frozenset[str] = frozenset()
    max_price_per_hour: float | None = None
    spot: SpotPreference = SpotPreference.PREFER
    nodes: int = 1  # a gang's size; the GPU shapes are per node
    min_nodes: int | None = None  # elastic: as few as this when `nodes` cannot be placed

    @classmethod
    def from_spec(cls, spec: JobSpec) -> Requirements:
        return cls(
            gpus=tuple(spec.gpu_specs()),
            cpus=spec.cpus,
            memory_gb=spec.memory_gb,
            clouds=frozenset(spec.clouds),
            regions=frozenset(spec.regions),
            max_price_per_hour=spec.max_price_per_hour,
            spot=spec.spot,
            nodes=spec.nodes,
            min_nodes=spec.min_nodes,
        )

    @staticmethod
    def key_of(spec: JobSpec) -> tuple[object, ...]:
        """Every spec field `from_spec` reads: equal keys give equal Requirements, so a pass
        builds (and scans the catalog for) each distinct one once. Keep the two in step."""
        return (
            tuple(spec.gpus),
            spec.gpu_memory_gb,
            spec.cpus,
            spec.memory_gb,
            frozenset(spec.clouds),
            frozenset(spec.regions),
            spec.max_price_per_hour,
            spec.spot,
            spec.nodes,
            spec.min_nodes,
        )

    def describe(self) -> str:
        what = " or ".join(str(g) for g in self.gpus)
        if self.nodes > 1:
            what = f"{self.nodes} nodes of {what}"
        if self.max_price_per_hour is not None:
            what += f" under ${self.max_price_per_hour:g}/h"
        if self.clouds:
            what += " in " + ",".join(sorted(self.clouds))
        if self.regions:
            what += " in region " + ",".join(sorted(self.regions))
        return what


@dataclass(frozen=True, slots=True)
class PlacementContext:
    """Everything besides the catalog that a decision depends on."""

    now: datetime
    # pool -> until when it is considered out of capacity (after a capacity error).
    unavailable: Mapping[str, datetime] = field(default_factory=dict)
    # Pools this job should not return to right now (it was just interrupted there).
    avoid_pools: frozenset[str] = frozenset()
    # Highest price per hour the tightest hard budget can pay for one accrual interval.
    max_affordable_price: float | None = None
    budget_name: str = ""
    remaining_gpu_hours: float | None = None
    interruption_rate: Mapping[str, float] = field(default_factory=dict)
    # The same rates as a column over the catalog's rows (see `rate_column`): computed once
    # per pass, so a decision costs O(candidates), not pools-with-history x candidates.
    rate_by_row: np.ndarray | None = None
    restart_overhead_hours: float = 0.05
    lost_work_hours: float = 0.0
    # A deadline policy may restrict the market (and spot zones) for this decision.
    markets: frozenset[Market] | None = None
    spot_zones: frozenset[str] | None = None
    # pool -> (how many instances it held before a capacity error, that reason): learned
    # from gang launches, still in force; gangs larger than that skip the pool.
    gang_capacity: Mapping[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    offering: Offering | None
    reason: str
    expected_cost: float | None = None
    candidates: int = 0
    nodes: int = 1  # instances to launch (fewer than asked: an elastic gang shrank)

    @property
    def placed(self) -> bool:
        return self.offering is not None


def _hardware_rows(req: Requirements, cat: Catalog) -> np.ndarray:
    parts = []
    for spec in req.gpus:
        rows = cat.rows_for_models(None if spec.model is None else [spec.model])
        keep = cat.gpu_count[rows] == spec.count
        if spec.min_memory_gb:
            keep &= cat.gpu_memory_gb[rows] >= spec.min_memory_gb
        parts.append(rows[keep])
    rows = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))
    if req.cpus:
        rows = rows[cat.vcpus[rows] >= req.cpus]
    if req.memory_gb:
        rows = rows[cat.memory_gb[rows] >= req.memory_gb]
    return rows


def _pool_mask(cat: Catalog, rows: np.ndarray, pools: set[str]) -> np.ndarray:
    codes = cat.pools.codes_of(pools)
    if len(codes) == 0:
        return np.zeros(len(rows), dtype=bool)
    return np.isin(cat.pool[rows], codes)


def gang_rate(node_rate: np.ndarray | float, nodes: int) -> np.ndarray | float:
    """A gang is interrupted when any node is: N independent Poisson losses of rate r have
    their first at rate N x r. The one place the gang's interruption-rate scaling lives."""
    return node_rate * max(1, nodes)


def _describe(req: Requirements, nodes: int) -> str:
    return req.describe() if nodes == req.nodes else replace(req, nodes=nodes).describe()


def requirement_rows(
    req: Requirements,
    cat: Catalog,
    markets: frozenset[Market] | None = None,
    spot_zones: frozenset[str] | None = None,
    nodes: int | None = None,
) -> tuple[np.ndarray, str]:
    """The filters that depend only on what the job asks for (and a policy's market
    restriction): hardware, clouds, regions, market, price cap. Jobs with the same
    requirements share the answer (see `Candidates`); `nodes` only words the reason."""
    n = req.nodes if nodes is None else nodes
    rows = _hardware_rows(req, cat)
    if len(rows) == 0:
        return _none(f"no offering with {_describe(req, n)}")
    if req.clouds:
        rows = rows[np.isin(cat.cloud[rows], cat.clouds.codes_of(req.clouds))]
    if req.regions:
        rows = rows[np.isin(cat.region[rows], cat.regions.codes_of(req.regions))]
    if len(rows) == 0:
        return _none(f"no offering with {_describe(req, n)}")

    allowed = {Market.SPOT, Market.ON_DEMAND}
    if req.spot is SpotPreference.ONLY:
        allowed = {Market.SPOT}
    elif req.spot is SpotPreference.NEVER:
        allowed = {Market.ON_DEMAND}
    if markets is not None:
        allowed &= markets
    if allowed != {Market.SPOT, Market.ON_DEMAND}:
        rows = rows[cat.spot[rows] == (Market.SPOT in allowed)] if allowed else rows[:0]
        if len(rows) == 0:
            kinds = "/".join(sorted(m.value for m in allowed)) or "any"
            return _none(f"no {kinds} offering with {_describe(req, n)}")
    if spot_zones is not None:
        zone_ok = np.isin(cat.zone[rows], cat.zones.codes_of(spot_zones))
        rows = rows[~cat.spot[rows] | zone_ok]

    if req.max_price_per_hour is not None:
        under = rows[cat.price[rows] <= req.max_price_per_hour]
        if len(under) == 0:
            cheapest = float(cat.price[rows].min())
            return _none(f"no offering with {_describe(req, n)} (cheapest is ${cheapest:.2f}/h)")
        rows = under
    return rows, ""


class Candidates:
    """A memo of `requirement_rows` over one catalog snapshot, for one reconcile pass: a
    pass over thousands of jobs scans the catalog once per distinct requirement, not per
    job. Pure: the same answers `requirement_rows` gives, computed at most once."""

    def __init__(self, cat: Catalog) -> None:
        self.cat = cat
        self._memo: dict[
            tuple[Requirements, int, frozenset[Market] | None, frozenset[str] | None],
            tuple[np.ndarray, str],
        ] = {}

    def rows(
        self,
        req: Requirements,
        markets: frozenset[Market] | None = None,
        spot_zones: frozenset[str] | None = None,
        nodes: int | None = None,
    ) -> tuple[np.ndarray, str]:
        n = req.nodes if nodes is None else nodes
        key = (req, n, markets, spot_zones)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = requirement_rows(req, self.cat, markets, spot_zones, n)
        return hit


def candidates(
    req: Requirements,
    cat: Catalog,
    ctx: PlacementContext,
    nodes: int | None = None,
    memo: Candidates | None = None,
) -> tuple[np.ndarray, str]:
    """Rows of every adequate offering (for `nodes` instances, default the job's), or no rows
    and the reason a user would want to read. `memo` (over `cat`) only saves work."""
    n = req.nodes if nodes is None else nodes
    if memo is not None and memo.cat is cat:
        rows, reason = memo.rows(req, ctx.markets, ctx.spot_zones, n)
    else:
        rows, reason = requirement_rows(req, cat, ctx.markets, ctx.spot_zones, n)
    if len(rows) == 0:
        return rows, reason

    now = ctx.now
    blocked = {p for p, until in ctx.unavailable.items() if until > now} | set(ctx.avoid_pools)
    if blocked:
        free = rows[~_pool_mask(cat, rows, blocked)]
        if len(free) == 0:
            return _none(
                f"all {len(rows)} offerings with {_describe(req, n)} are out of capacity or "
                "were just interrupted; retrying when their back-off ends",
            )
        rows = free

    if n > 1 and ctx.gang_capacity:
        small = {p for p, (cap, _) in ctx.gang_capacity.items() if cap < n}
        if small:
            mask = _pool_mask(cat, rows, small)
            if mask.all():
                pool = cat.offering(rows[0]).pool
                why = ctx.gang_capacity.get(pool, (0, ""))[1] or "too small for the gang"
                return _none(
                    f"no pool can take {n} nodes now ({len(rows)} too small; {why}); "
                    "retrying when their back-off ends"
                )
            rows = rows[~mask]

    if ctx.max_affordable_price is not None:
        # A gang reserves N x the price: every one of its instances is billed.
        affordable = rows[cat.price[rows] * n <= ctx.max_affordable_price]
        if len(affordable) == 0:
            cheapest = float(cat.price[rows].min()) * n
            return _none(
                f"budget '{ctx.budget_name}' cannot pay ${cheapest:.2f}/h for one accrual "
                f"interval (at most ${ctx.max_affordable_price:.2f}/h fits its headroom)",
            )
        rows = affordable

    return rows, ""


def _none(reason: str) -> tuple[np.ndarray, str]:
    return np.empty(0, dtype=np.intp), reason


def place(
    req: Requirements, cat: Catalog, ctx: PlacementContext, memo: Candidates | None = None
) -> Decision:
    """Choose the adequate offering with the lowest expected cost to finish, or say why none.
    An elastic gang that cannot be placed whole takes the most nodes that can be. `memo`
    (over the same catalog) only saves work: the decision is the same without it."""
    rows, reason = candidates(req, cat, ctx, memo=memo)
    n = req.nodes
    if len(rows) == 0 and req.min_nodes is not None and req.min_nodes < req.nodes:
        for fewer in range(req.nodes - 1, req.min_nodes - 1, -1):
            rows, _ = candidates(req, cat, ctx, nodes=fewer, memo=memo)
            if len(rows):
                n = fewer
                break
    if len(rows) == 0:
        return Decision(None, reason)
    cost = expected_cost(cat, rows, ctx, nodes=n)
    best = int(np.argmin(cost))
    why = "cheapest expected cost to finish"
    if n < req.nodes:
        why += f" on {n} of {req.nodes} nodes ({reason})"
    return Decision(
        cat.offering(rows[best]),
        why,
        expected_cost=float(cost[best]),
        candidates=len(rows),
        nodes=n,
    )


def expected_cost(
    cat: Catalog, rows: np.ndarray, ctx: PlacementContext, nodes: int = 1
) -> np.ndarray:
    """price x N x hours x (1 + gang rate x (restart overhead + work lost per interruption)),
    where the work is split over N nodes' GPUs and the gang rate is N x a node's."""
    gpus = np.maximum(cat.gpu_count[rows], 1) * max(1, nodes)
    hours = (ctx.remaining_gpu_hours / gpus) if ctx.remaining_gpu_hours else np.ones(len(rows))
    if ctx.rate_by_row is not None and len(ctx.rate_by_row) == len(cat):
        rate = ctx.rate_by_row[rows]
    elif ctx.interruption_rate:
        rate = rate_column(cat, ctx.interruption_rate)[rows]
    else:
        rate = np.where(cat.spot[rows], DEFAULT_SPOT_INTERRUPTION_RATE, 0.0)
    penalty = gang_rate(rate, nodes) * (ctx.restart_overhead_hours + ctx.lost_work_hours)
    return cat.price[rows] * max(1, nodes) * hours * (1.0 + penalty)


def rate_column(
    cat: Catalog, learned: Mapping[str, float], default: float = DEFAULT_SPOT_INTERRUPTION_RATE
) -> np.ndarray:
    """Interruption rate per catalog row: learned where a pool has history, else the prior;
    0 for on-demand rows."""
    by_code = np.full(len(cat.pools.values), default, dtype=np.float64)
    for pool, rate in learned.items():
        code = cat.pools.index.get(pool)
        if code is not None:
            by_code[code] = rate
    return np.where(cat.spot, by_code[cat.pool] if len(cat) else by_code[:0], 0.0)
