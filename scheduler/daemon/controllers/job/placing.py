"""Where a waiting job goes: a launch intent, a budget hold, or the reason it waits.

Placement is pure (scheduler.core.placement, and the deadline policy for a job with a
deadline): decided in memory on the pass's facts and left in the pass's writes. Each intent
lowers the budget headroom the next job of the same pass sees by the burn the launch will
reserve (N x the price for a gang), so one pass never places more than a budget pays for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from providers.base import Market
from scheduler.core.config import Config
from scheduler.core.deadline import DeadlinePlanner
from scheduler.core.errors import clean
from scheduler.core.jobspec import JobSpec
from scheduler.core.placement import place
from scheduler.core.states import JobState
from scheduler.daemon.controllers.base import Db
from scheduler.daemon.controllers.job.deadline_advice import advise, deadline_job
from scheduler.daemon.controllers.job.holds import budget_to_hold_under
from scheduler.daemon.controllers.job.snapshot import PassFacts
from scheduler.daemon.controllers.job.writes import Hold, Intent, PassWrites
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job


class Placement:
    def __init__(
        self, db: Db, config: Callable[[], Config], planner: Callable[[], DeadlinePlanner]
    ) -> None:
        self.db = db
        self._config = config
        self._planner = planner

    def place(
        self,
        job: Job,
        facts: PassFacts,
        now: datetime,
        writes: PassWrites,
        beside: Attempt | None = None,
    ) -> None:
        """Decide where `job` goes (pure); the intent is written with the pass's batch.

        `beside`: the job's live attempt, which has a notice (`place_on_notice`): the next
        attempt is placed now, away from that pool, while it saves. When nothing fits, the
        job is left as it is (it is running): it is placed again once that attempt ends."""
        spec = facts.spec(job.spec_json)
        req = facts.requirements(spec)
        ctx = facts.placement_context(job, spec, now, self._config().policy.restart_overhead)
        if beside is not None:
            ctx = replace(ctx, avoid_pools=ctx.avoid_pools | {beside.pool})
        fallback = fallen_back(spec, facts.interrupted_at.get(job.id, ()), now)
        if fallback:
            ctx = replace(ctx, markets=frozenset({Market.ON_DEMAND}))
        if job.deadline is not None and spec.gpu_hours:
            with self.db.write() as s:
                advice = advise(
                    s, self._planner(), now, deadline_job(job, spec, now), req, facts.catalog, ctx
                )
            if advice.context is None:
                if beside is None:
                    writes.explain(job, advice.reason, now)
                return
            ctx = advice.context
        decision = place(req, facts.catalog, ctx, facts.memo)
        if decision.offering is None and beside is not None:
            return  # running on: the ordinary recovery places it once the attempt ends
        if decision.offering is None:
            rejected = facts.rejected.get(job.id)
            if rejected:
                # Placeable but for the providers that rejected it: every adequate one did.
                anywhere = replace(ctx, avoid_pools=facts.avoid.get(job.id, frozenset()))
                if place(req, facts.catalog, anywhere, facts.memo).placed:
                    self._fail(job, every_provider_rejected(rejected), now)
                    return
            budget = budget_to_hold_under(job, req, ctx, facts)
            if budget is not None:
                why = f"{decision.reason}; held until budget '{budget}' has a new window or limit"
                spent = next((st.spent for st in facts.statuses if st.rule.name == budget), None)
                writes.holds.append(Hold(job.id, budget, why, now, spent))
                return
            writes.explain(job, decision.reason, now)
            return
        o = decision.offering
        note = decision.reason if decision.nodes < req.nodes else fallback
        interval = None
        if spec.auto_checkpoint:
            rate = facts.rates.get(o.pool, self._config().policy.spot_interruption_prior)
            spot = o.market is Market.SPOT
            interval = spec.interval_at(rate if spot else 0.0).total_seconds()
        replaces = beside.id if beside is not None else None
        writes.intents.append(Intent(job.id, o, now, decision.nodes, note, interval, replaces))
        # The next job in this pass sees the smaller headroom (the launch reserves its burn,
        # N x the price for a gang).
        facts.statuses = [
            replace(st, burn_per_hour=st.burn_per_hour + o.price_per_hour * decision.nodes)
            if st.rule.applies_to(job.name, job.team, job.submitted_by)
            else st
            for st in facts.statuses
        ]

    def _fail(self, job: Job, why: str, now: datetime) -> None:
        with self.db.write() as s:
            fresh = s.get(Job, job.id)
            if fresh is None or fresh.state not in (JobState.PENDING, JobState.RECOVERING):
                return
            fresh.state, fresh.reason, fresh.updated_at = JobState.FAILED, why, now
            s.add(fresh)
            emit(s, now, "failed", why, job_id=job.id, level="warning")
        self._planner().forget(job.id)


def every_provider_rejected(rejected: dict[str, str]) -> str:
    """The reason a job fails once every adequate provider rejected its request."""
    each = "; ".join(f"{name}: {why}" for name, why in sorted(rejected.items()))
    return clean(f"every adequate provider rejected the request ({each})", 900)


def fallen_back(spec: JobSpec, interrupted_at: Iterable[datetime], now: datetime) -> str:
    """Why the job now runs on on-demand (`fallback_after` interruptions within
    `fallback_window`), or "" while spot is still allowed."""
    if spec.fallback_after is None or spec.deadline is not None:
        return ""
    since = now - spec.fallback_window
    n = sum(1 for t in interrupted_at if t > since)
    if n < spec.fallback_after:
        return ""
    return f"on-demand after {n} interruptions within {spec.fallback_window} (fallback_after)"
