"""Tick-level replay of one job under one policy over a trace, on a simulated clock.

Model, per tick of `gap_hours`:
- at the tick start, a spot attempt whose zone became unavailable is interrupted: work since
  the last checkpoint is lost (checkpoint_interval 0 = checkpoint on the notice, nothing lost);
- the policy observes and decides; a new launch pays `restart_overhead` hours (billed, no
  progress) before work advances; a spot launch into an unavailable zone fails (no cost);
- the tick is billed at the price in force for the time the attempt runs (the final tick
  only until the work is done); launching into another region than the checkpoint's adds
  `migration_cost` once.
- with `save_hours`, periodic checkpoints cost time: a share save / (interval + save) of
  each tick's running time makes no progress (billed all the same);
- a job still unfinished at the deadline counts as a miss and is finished on on-demand
  (billed), so costs stay comparable.
- with `budget` (hard, USD), the daemon's budget rules decide per tick whether an attempt
  may launch or must stop, so spend never crosses it.
- with `node_losses` (a gang's single-node losses, trace.gang_losses), a spot gang losing
  one node is not interrupted: the node is replaced in place (the replace-one path), the
  work since the last checkpoint is lost and the gang pays `restart_overhead` again, billed
  in full (the others wait while the replacement boots), with no progress.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.core.budget import BudgetRule, BudgetStatus, Window, max_affordable_price, must_stop
from scheduler.core.policy.base import EPS, WAIT, Action, ActionKind, Observation, Policy

from .trace import Trace

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class Job:
    work: float  # hours of work on one instance
    deadline: float  # hours after the start
    restart_overhead: float  # hours lost at each launch
    checkpoint_interval: float = 0.0  # hours of work between checkpoints; 0 = on notice
    migration_cost: float = 0.0  # USD to move the checkpoint to another region
    budget: float | None = None  # hard cap in USD
    # Hours one periodic checkpoint takes (billed, no progress); with checkpoint_interval > 0
    # a share save / (interval + save) of each tick's running time goes to saving.
    save_hours: float = 0.0


@dataclass(slots=True)
class Outcome:
    cost: float = 0.0
    finished: bool = False
    met_deadline: bool = False
    finish_time: float = math.inf
    work_done: float = 0.0
    launches: int = 0
    failed_launches: int = 0
    interruptions: int = 0
    replacements: int = 0  # gang nodes replaced in place (node_losses)
    lost_work: float = 0.0
    spot_hours: float = 0.0
    on_demand_hours: float = 0.0
    migrations: int = 0
    late_cost: float = 0.0  # on-demand spend after a missed deadline
    budget_stopped: bool = False
    early_saves: int = 0  # checkpoints taken on an early signal


def simulate(
    trace: Trace,
    job: Job,
    policy: Policy,
    finish_late: bool = True,
    history: Trace | None = None,
    adversary: Callable[[int, Action | None, list[bool]], list[bool]] | None = None,
    early_signals: Mapping[int, frozenset[str]] | None = None,
    node_losses: np.ndarray | None = None,
) -> Outcome:
    """Replay `job` from tick 0 of `trace`; `history` (the ticks just before) is shown to
    policies that learn (the daemon has been watching the pools before the job came).

    `adversary(tick, running, available)` may rewrite each tick's availability from what
    the policy is running (an adaptive adversary, e.g. one that kills every spot launch).

    `early_signals` (tick -> zones) are rebalance recommendations: a spot attempt in one of
    those zones saves at once (the trainer's early checkpoint) and the policy sees the zones
    in `Observation.at_risk`."""
    g = trace.gap_hours
    zones = trace.zones
    zindex = {z: i for i, z in enumerate(zones)}
    avail_rows = trace.available.T.tolist()  # per tick: list of bools
    price_rows = trace.spot_price.T.tolist()
    od_price = trace.on_demand_price
    o = job.restart_overhead
    prepare = getattr(policy, "prepare", None)
    policy.reset()
    if prepare is not None:
        prepare(trace, job)
    warm_up = getattr(policy, "warm_up", None)
    if history is not None and warm_up is not None and history.n_ticks:
        n = history.n_ticks
        warm_up(
            [
                ((i - n) * g, dict(zip(history.zones, col, strict=True)))
                for i, col in enumerate(history.available.T.tolist())
            ]
        )

    out = Outcome()
    place: Action | None = None  # the running attempt
    remaining_oh = 0.0
    done = ckpt = 0.0
    ckpt_region: str | None = None
    last_prices: tuple | None = None
    price_map: dict[str, float] = {}
    n_ticks = min(trace.n_ticks, math.ceil(job.deadline / g - EPS))
    for t in range(n_ticks):
        elapsed = t * g
        avail = avail_rows[t]
        if adversary is not None:
            avail = adversary(t, place, avail)
        if (
            place is not None
            and place.kind is ActionKind.SPOT
            and not avail[zindex[place.zone or ""]]
        ):
            out.interruptions += 1
            if job.checkpoint_interval > 0:
                out.lost_work += done - ckpt
                done = ckpt
            place = None
        elif (
            node_losses is not None
            and place is not None
            and place.kind is ActionKind.SPOT
            and node_losses[zindex[place.zone or ""], t]
        ):
            out.replacements += 1
            if job.checkpoint_interval > 0:
                out.lost_work += done - ckpt
                done = ckpt
            remaining_oh += o
        at_risk = early_signals.get(t, frozenset()) if early_signals else frozenset()
        if place is not None and place.kind is ActionKind.SPOT and place.zone in at_risk:
            ckpt = done  # the early save: nothing since it is lost if the notice follows
            out.early_saves += 1
        prices = price_rows[t]
        if prices is not last_prices:
            price_map = dict(zip(zones, prices, strict=True))
            last_prices = prices
        obs = Observation(
            elapsed=elapsed,
            work_done=done,
            work_total=job.work,
            deadline=job.deadline,
            restart_overhead=o,
            remaining_overhead=remaining_oh if place is not None else 0.0,
            placement=place,
            spot_available=dict(zip(zones, avail, strict=True)),
            spot_price=price_map,
            on_demand_price=od_price,
            tick_hours=g,
            migration_cost=_migration(trace, job, ckpt_region),
            spent=out.cost,
            checkpoint_interval=job.checkpoint_interval,
            work_at_risk=done - ckpt if job.checkpoint_interval > 0 else 0.0,
            at_risk=at_risk,
        )
        policy.observe(obs)
        action = policy.decide(obs)
        if action.kind is ActionKind.SPOT:
            if action.zone not in zindex:
                raise ValueError(f"policy {policy.name} chose unknown zone {action.zone!r}")
            if not avail[zindex[action.zone]]:
                out.failed_launches += 1
                action = WAIT
        if action.kind is ActionKind.WAIT:
            place = None
            continue
        price = (
            od_price if action.kind is ActionKind.ON_DEMAND else prices[zindex[action.zone or ""]]
        )
        launch = action != place
        mig = 0.0
        region = ckpt_region
        if launch and action.kind is ActionKind.SPOT:
            region = trace.regions[zindex[action.zone or ""]]
            if ckpt_region is not None and region != ckpt_region:
                mig = job.migration_cost
        if job.budget is not None and not _budget_allows(
            job.budget, out.cost + mig, price, g, launch
        ):
            out.budget_stopped = True
            place = None
            break
        if launch:
            out.launches += 1
            remaining_oh = o
            if mig:
                out.migrations += 1
                out.cost += mig
            ckpt_region = region
        place = action
        spent_oh = min(remaining_oh, g)
        remaining_oh -= spent_oh
        keep = 1.0
        if job.save_hours > 0 and job.checkpoint_interval > 0:
            keep = job.checkpoint_interval / (job.checkpoint_interval + job.save_hours)
        progress = (g - spent_oh) * keep
        need = job.work - done
        used = g
        if progress >= need - EPS:
            used = spent_oh + need / keep
            done = job.work
        else:
            done += progress
        out.cost += price * used
        if action.kind is ActionKind.SPOT:
            out.spot_hours += used
        else:
            out.on_demand_hours += used
        ckpt = (
            done
            if job.checkpoint_interval <= 0
            else max(  # periodic saves, or a later early save
                ckpt,
                math.floor(done / job.checkpoint_interval + EPS) * job.checkpoint_interval,
            )
        )
        if done >= job.work - EPS:
            out.finished = True
            out.finish_time = elapsed + used
            out.met_deadline = out.finish_time <= job.deadline + 1e-6
            break
    out.work_done = done
    if not out.finished and finish_late and not out.budget_stopped:
        rest = job.work - done
        oh = remaining_oh if place is not None and place.kind is ActionKind.ON_DEMAND else o
        late = (rest + oh) * od_price
        if job.budget is not None and out.cost + late > job.budget:
            out.budget_stopped = True
            return out
        out.late_cost = late
        out.cost += out.late_cost
        out.on_demand_hours += rest + oh
        out.work_done = job.work
        out.finish_time = n_ticks * g + rest + oh
    return out


def _budget_allows(limit: float, spent: float, price: float, tick: float, launch: bool) -> bool:
    """The daemon's hard-budget rules (scheduler.core.budget), applied once per tick.

    A running attempt stops if the next tick would cross the limit; a new one launches only
    if its price is affordable for a whole tick (the accrual interval).
    """
    rule = BudgetRule("replay", "global", limit, Window.TOTAL, hard=True)
    if launch:
        cap, _ = max_affordable_price([BudgetStatus(rule, spent, 0.0)], "job", "team", tick)
        return cap is None or price <= cap + EPS
    return not must_stop(BudgetStatus(rule, spent, price), tick)


def _migration(trace: Trace, job: Job, ckpt_region: str | None) -> dict[str, float]:
    if not job.migration_cost or ckpt_region is None:
        return {}
    return {
        z: job.migration_cost
        for z, r in zip(trace.zones, trace.regions, strict=True)
        if r != ckpt_region
    }
