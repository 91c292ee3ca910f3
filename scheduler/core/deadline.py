"""Deadline jobs: the daemon asks the same policy the replay benchmark measures.

At each placement point of a job with a deadline and a work estimate, the adequate offerings are
summarised as the policy's Observation (spot availability and price per zone, the on-demand
price, work done from progress.json, time left) and the policy's Action becomes a restriction of
the placement context: wait, on-demand only, or spot in one zone. Pure apart from the per-job
policy instances it keeps (policies learn pool availability online); `state` and `restore`
let the daemon keep what they learned (PolicyState rows) across restarts and reloads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from providers.base import Market
from scheduler.core.catalog import Catalog
from scheduler.core.placement import PlacementContext, Requirements, candidates
from scheduler.core.policy import (
    ON_DEMAND,
    SPOT,
    Action,
    ActionKind,
    Observation,
    Policy,
    get_policy,
)
from scheduler.core.policy.learning import AvailabilityModel, PoolStats


@dataclass(frozen=True, slots=True)
class DeadlineJob:
    job_id: str
    submitted: datetime
    deadline: datetime
    work_hours: float  # wall-clock hours of work on one instance of the requested shape
    progress: float  # fraction done, 0..1
    # USD paid so far per instance (the daemon's record); None: the policy keeps its own ledger
    spent: float | None = None
    # Hours of work between the job's checkpoints (its checkpoint_interval) and the work
    # since the last one, lost if the running attempt is taken back: the regret hedge's
    # worst case counts them (0: a checkpoint on the notice is assumed).
    checkpoint_interval: float = 0.0
    work_at_risk: float = 0.0


@dataclass(frozen=True, slots=True)
class DeadlineAdvice:
    context: PlacementContext | None  # None: wait this pass
    reason: str
    action: Action | None  # None: no policy applies (nothing adequate, or no on-demand)

    def moves_from(self, current: Action) -> bool:
        """Whether following this advice means leaving the attempt that runs now."""
        return self.action is not None and self.action != current


def placement_of(market: str, zone: str) -> Action:
    """A running attempt as the policy sees it."""
    return SPOT(zone) if market == Market.SPOT.value else ON_DEMAND


class DeadlinePlanner:
    def __init__(self, policy_name: str, restart_overhead_hours: float, tick_hours: float) -> None:
        get_policy(policy_name)  # fail early on a bad name
        self.policy_name = policy_name
        self.restart_overhead = restart_overhead_hours
        self.tick_hours = tick_hours
        self._policies: dict[str, Policy] = {}
        self._zones: dict[str, set[str]] = {}

    def knows(self, job_id: str) -> bool:
        return job_id in self._policies

    def state(self, job_id: str) -> dict[str, Any] | None:
        """What this job's policy learned, as JSON-able data (None: nothing yet)."""
        policy = self._policies.get(job_id)
        if policy is None:
            return None
        out: dict[str, Any] = {"zones": sorted(self._zones.get(job_id, ()))}
        model = getattr(policy, "model", None)
        if isinstance(model, AvailabilityModel):
            out["last_time"] = model.last_time
            out["pools"] = {z: asdict(st) for z, st in model.pools.items()}
        if isinstance(getattr(policy, "_ledger", None), float):
            out["ledger"] = policy._ledger  # type: ignore[attr-defined]
        return out

    def restore(self, job_id: str, state: dict[str, Any], unseen_hours: float = 0.0) -> None:
        """Recreate this job's policy from `state` (what `state` returned, possibly in an
        earlier process): a restart or SIGHUP must not throw away what it learned.

        `unseen_hours` is how long ago the state was saved. Past two decision ticks the
        daemon was down: whether each pool stayed as it was is unknown, so the current
        spell's or outage's age restarts at the next look (a lower bound), instead of
        counting the hours nobody watched as part of it."""
        policy = get_policy(self.policy_name)
        self._zones[job_id] = set(state.get("zones", ()))
        model = getattr(policy, "model", None)
        if isinstance(model, AvailabilityModel) and "pools" in state:
            model.pools = {z: PoolStats(**st) for z, st in state["pools"].items()}
            model.last_time = state.get("last_time")
            if unseen_hours > 2.0 * self.tick_hours:
                for st in model.pools.values():
                    st.since, st.since_seen = None, False
        if "ledger" in state and hasattr(policy, "_ledger"):
            policy._ledger = float(state["ledger"])  # type: ignore[attr-defined]
        self._policies[job_id] = policy

    def warm(self, job_id: str, state: dict[str, Any]) -> None:
        """Start a new job's policy from what another job of the same shape learned about the
        pools (decayed counts kept; its clock, spend and zone list are that job's, not ours)."""
        pools = {z: {**st, "last": None, "since": None} for z, st in state.get("pools", {}).items()}
        self.restore(job_id, {"pools": pools, "last_time": None})

    def forget(self, job_id: str) -> None:
        self._policies.pop(job_id, None)
        self._zones.pop(job_id, None)

    def advise(
        self,
        job: DeadlineJob,
        req: Requirements,
        cat: Catalog,
        ctx: PlacementContext,
        current: Action | None = None,
        remaining_overhead: float = 0.0,
        current_price: float | None = None,
    ) -> DeadlineAdvice:
        """What the policy wants now; `current` is the running attempt's placement, if any,
        and `current_price` what it pays per hour."""
        rows, reason = candidates(req, cat, replace(ctx, markets=None, spot_zones=None))
        if len(rows) == 0:
            return DeadlineAdvice(None, reason, None)
        spot = rows[cat.spot[rows]]
        ondemand = rows[~cat.spot[rows]]
        if len(ondemand) == 0:
            # Without an on-demand fallback no deadline policy can promise anything.
            return DeadlineAdvice(ctx, "no on-demand fallback; placing by cost", None)
        zone_price: dict[str, float] = {}
        for z, p in zip(cat.zone[spot], cat.price[spot], strict=True):
            name = cat.zones.values[z]
            zone_price[name] = min(p, zone_price.get(name, np.inf))
        seen = self._zones.setdefault(job.job_id, set())
        seen.update(zone_price)
        if current is not None and current.kind is ActionKind.SPOT and current.zone:
            # The running attempt's zone may have no capacity left for new launches: our
            # instance still runs there (a reclaim arrives as an interruption), so the policy
            # sees it up at the price the attempt pays, as the price-following controller
            # keeps an attempt its catalog no longer lists. Shown down, it made the policy
            # stop a healthy instance to wait for, or bridge to, capacity it already had.
            seen.add(current.zone)
            if current.zone not in zone_price and current_price is not None:
                zone_price[current.zone] = current_price
        policy = self._policies.setdefault(job.job_id, get_policy(self.policy_name))
        elapsed = (ctx.now - job.submitted).total_seconds() / 3600
        obs = Observation(
            elapsed=elapsed,
            work_done=job.work_hours * job.progress,
            work_total=job.work_hours,
            deadline=(job.deadline - job.submitted).total_seconds() / 3600,
            restart_overhead=self.restart_overhead,
            remaining_overhead=remaining_overhead,
            placement=current,
            spot_available={z: z in zone_price for z in sorted(seen)},
            spot_price={z: float(zone_price.get(z, np.inf)) for z in sorted(seen)},
            on_demand_price=float(cat.price[ondemand].min()),
            tick_hours=self.tick_hours,
            spent=job.spent,
            checkpoint_interval=job.checkpoint_interval,
            work_at_risk=job.work_at_risk if current is not None else 0.0,
        )
        policy.observe(obs)
        action = policy.decide(obs)
        slack = obs.slack_if_launch
        if action.kind is ActionKind.WAIT:
            return DeadlineAdvice(
                None,
                f"{policy.wait_reason()}: {slack:.1f} h of slack before the deadline "
                f"(policy {self.policy_name})",
                action,
            )
        if action.kind is ActionKind.ON_DEMAND:
            return DeadlineAdvice(
                replace(ctx, markets=frozenset({Market.ON_DEMAND})),
                f"on-demand to meet the deadline ({slack:.1f} h of slack)",
                action,
            )
        return DeadlineAdvice(
            replace(
                ctx, markets=frozenset({Market.SPOT}), spot_zones=frozenset({action.zone or ""})
            ),
            f"spot in {action.zone} ({slack:.1f} h of slack)",
            action,
        )
