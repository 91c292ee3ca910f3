"""The omniscient lower bound: dynamic programming over the whole future trace.

Reference only (it knows when every zone will be available). Work is counted in units of
tick/M; the restart overhead is rounded DOWN to whole units and work to the nearest unit,
so the result is a lower bound for the simulator's cost up to that rounding. Checkpointing
is assumed on notice (no lost work) and migrations are free: both only make real runs dearer.

State at a tick start: progress p, and either idle or running kind k (0 = on-demand, 1.. =
spot zones) for j ticks (j capped at J once the overhead is paid). Batched over B windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import EPS, ON_DEMAND, SPOT, WAIT, Action, ActionKind, Observation, Policy

INF = 1e18


@dataclass(frozen=True)
class Grid:
    units_per_tick: int
    unit_hours: float
    work_units: int
    overhead_units: int
    levels: int  # J: ticks until an attempt's overhead is paid (>= 1)
    n_ticks: int

    @classmethod
    def make(cls, gap: float, work: float, overhead: float, deadline: float, m: int) -> Grid:
        unit = gap / m
        ou = math.floor(overhead / unit + 1e-6)
        return cls(
            m,
            unit,
            round(work / unit),
            ou,
            max(1, math.ceil(ou / m)),
            math.ceil(deadline / gap - EPS),
        )

    def level_overhead(self, j: int) -> int:
        """Overhead units still to pay at the start of an attempt's tick j (j = 0: launch)."""
        return max(0, self.overhead_units - j * self.units_per_tick)


def _shift(v: np.ndarray, inc: int) -> np.ndarray:
    """out[..., p] = v[..., min(P, p + inc)]."""
    if inc <= 0:
        return v
    out = np.empty_like(v)
    out[..., :-inc] = v[..., inc:]
    out[..., -inc:] = v[..., -1:]
    return out


def solve(
    available: np.ndarray,
    spot_price: np.ndarray,
    on_demand_price: float,
    grid: Grid,
    keep: bool = False,
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Exact min cost from (tick 0, idle, no progress), per batch row.

    available/spot_price: (B, Z, T) with T >= grid.n_ticks. Returns (cost[B], tables) where
    tables[t] = (V_idle[B, P+1], V_run[B, K, J, P+1]) at tick t when keep=True.
    """
    b, z, _ = available.shape
    k_kinds = z + 1
    m, pw, jn = grid.units_per_tick, grid.work_units, grid.levels
    unit = grid.unit_hours
    rem = np.arange(pw, -1, -1, dtype=np.float64)  # P - p
    v_idle = np.full((b, pw + 1), INF)
    v_idle[:, pw] = 0.0
    v_run = np.full((b, k_kinds, jn, pw + 1), INF)
    v_run[..., pw] = 0.0
    tables: list[tuple[np.ndarray, np.ndarray]] = []
    if keep:
        tables.append((v_idle, v_run))
    # per-level constants: overhead paid this tick, progress made, next level
    lv = []
    for j in range(jn + 1):
        c = min(grid.level_overhead(j), m)
        lv.append((c, m - c, min(jn, j + 1) - 1))
    for t in range(grid.n_ticks - 1, -1, -1):
        price = np.empty((b, k_kinds))
        price[:, 0] = on_demand_price
        price[:, 1:] = spot_price[:, :, t]
        up = np.ones((b, k_kinds), dtype=bool)
        up[:, 1:] = available[:, :, t]
        # launch at this tick (level 0)
        c0, inc0, nj0 = lv[0]
        use0 = c0 + np.minimum(inc0, rem)  # units billed
        q_launch = price[:, :, None] * unit * use0 + _shift(v_run[:, :, nj0, :], inc0)
        q_launch = np.where(up[:, :, None], q_launch, INF)
        new_idle = np.minimum(v_idle, q_launch.min(axis=1))
        new_run = np.empty_like(v_run)
        for j in range(1, jn + 1):
            c, inc, nj = lv[j]
            use = c + np.minimum(inc, rem)
            q = price[:, :, None] * unit * use + _shift(v_run[:, :, nj, :], inc)
            q = np.where(up[:, :, None], np.minimum(q, new_idle[:, None, :]), new_idle[:, None, :])
            new_run[:, :, j - 1, :] = q
        new_idle[:, pw] = 0.0
        new_run[..., pw] = 0.0
        v_idle, v_run = new_idle, new_run
        if keep:
            tables.append((v_idle, v_run))
    if keep:
        tables.reverse()
    return v_idle[:, 0], tables


def pick_units(gap: float, overhead: float, work: float, deadline: float, budget: float) -> int:
    """Finest units_per_tick (<= 50) whose state tables fit in `budget` cells."""
    for m in (50, 40, 30, 20, 10, 8, 6, 5, 4, 3, 2, 1):
        units = work / (gap / m)
        if units * math.ceil(deadline / gap) <= budget:
            return m
    return 1


class OptimalPolicy(Policy):
    """Follows the DP's plan; `prepare(trace, job)` must be called with the future trace."""

    name = "optimal"

    def __init__(self, max_cells: float = 2e7) -> None:
        self.max_cells = max_cells
        self._grid: Grid | None = None
        self._tables: list = []
        self._zones: tuple[str, ...] = ()
        self.planned_cost = math.nan

    def prepare(self, trace, job) -> None:  # type: ignore[no-untyped-def]
        g = trace.gap_hours
        m = pick_units(g, job.restart_overhead, job.work, job.deadline, self.max_cells)
        self._grid = Grid.make(g, job.work, job.restart_overhead, job.deadline, m)
        n = self._grid.n_ticks
        avail = trace.available[None, :, :n]
        price = trace.spot_price[None, :, :n]
        cost, self._tables = solve(avail, price, trace.on_demand_price, self._grid, keep=True)
        self.planned_cost = float(cost[0])
        self._zones = trace.zones

    def decide(self, obs: Observation) -> Action:
        grid = self._grid
        if grid is None:
            raise RuntimeError("optimal policy needs prepare(trace, job) before decide()")
        t = round(obs.elapsed / obs.tick_hours)
        if t + 1 >= len(self._tables):
            return ON_DEMAND
        v_idle, v_run = (a[0] for a in self._tables[t + 1])
        unit, m, pw = grid.unit_hours, grid.units_per_tick, grid.work_units
        p = min(pw, math.floor(obs.work_done / unit + 1e-6))
        rem = pw - p
        options: list[tuple[float, Action]] = [(float(v_idle[p]), WAIT)]
        cur_kind = None
        if obs.placement is not None and obs.placement.kind is not ActionKind.WAIT:
            cur_kind = 0 if obs.on_demand else 1 + self._zones.index(obs.placement.zone)
        kinds: list[tuple[int, Action, float]] = [(0, ON_DEMAND, obs.on_demand_price)]
        for i, zname in enumerate(self._zones):
            if obs.spot_available.get(zname, False):
                kinds.append((i + 1, SPOT(zname), obs.spot_price[zname]))
        for k, act, price in kinds:
            if k == cur_kind:
                left = math.floor(obs.remaining_overhead / unit + 1e-6)
                gone = grid.overhead_units - left
                j = grid.levels if left <= 0 else min(grid.levels, max(1, math.ceil(gone / m)))
            else:
                j = 0
            c = min(grid.level_overhead(j), m)
            inc = m - c
            use = c + min(inc, rem)
            nj = min(grid.levels, j + 1) - 1
            value = price * unit * use + float(v_run[k, nj, min(pw, p + inc)])
            options.append((value - (1e-9 if k == cur_kind else 0.0), act))
        return min(options, key=lambda x: x[0])[1]
