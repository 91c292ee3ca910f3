"""The per-job step: settle ended attempts, follow policies, place, and write launch intents.

No cloud I/O here: a placement becomes an Attempt row (the intent), which the
LaunchController turns into a cloud call. One job's failure never stops the others: a job
whose step keeps failing is backed off exponentially and quarantined (FAILED, with the
reason) after `quarantine_after` failures in a row; the event is written when the reason
changes, not every pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
from sqlmodel import Session, col, select

from providers.base import Market
from scheduler import budget as budgets
from scheduler import follow
from scheduler.audit import emit
from scheduler.catalog import Catalog
from scheduler.clock import Clock
from scheduler.config import Config
from scheduler.controllers.base import (
    ACTIVE_JOB_STATES,
    LIVE,
    CatalogHolder,
    CrashForTest,
    Db,
    hours,
    later,
    safe_message,
)
from scheduler.controllers.spend import SpendController, request_stop
from scheduler.deadline import DeadlineAdvice, DeadlineJob, DeadlinePlanner, placement_of
from scheduler.jobspec import JobSpec
from scheduler.lifecycle import JobFacts, LastAttempt, Limits, backoff_seconds, settle
from scheduler.models import (
    Attempt,
    AttemptEnd,
    AttemptState,
    Job,
    JobState,
    PolicyState,
    PoolState,
)
from scheduler.placement import (
    PlacementContext,
    Requirements,
    expected_cost,
    place,
    rate_column,
)
from scheduler.policy import Action
from scheduler.store import CheckpointStores, StoreError

log = logging.getLogger("spotwise.reconcile")
PRIOR_HOURS = 10.0  # weight of the interruption prior, in hours of observed exposure


@dataclass
class PassFacts:
    """What every job's decision in one pass shares, read once per pass."""

    now: datetime
    unavailable: dict[str, datetime]
    rates: dict[str, float]
    rate_by_row: np.ndarray
    statuses: list[budgets.BudgetStatus]
    hold_hours: float
    # pool -> (instances it held, why): gangs larger than that skip it (PoolState).
    gang_capacity: dict[str, tuple[int, str]] = field(default_factory=dict)


class JobController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        catalog: CatalogHolder,
        stores: CheckpointStores,
        spend: SpendController,
        planner: Callable[[], DeadlinePlanner],
        config: Callable[[], Config],
    ) -> None:
        self.db = db
        self.clock = clock
        self.catalog = catalog
        self.stores = stores
        self.spend = spend
        self._planner = planner
        self._config = config
        self.placing = True  # cleared on SIGTERM: finish in-flight work, start nothing new

    # -- the pass ----------------------------------------------------------------------------
    def step(self, only: list[str] | None = None) -> list[str]:
        """Step every active job (or `only` these); returns the attempt ids of new intents."""
        with self.db.read() as s:
            q = select(Job.id).where(col(Job.state).in_(ACTIVE_JOB_STATES))
            if only is not None:
                q = q.where(col(Job.id).in_(only))
            ids = list(s.exec(q.order_by(col(Job.created_at))).all())
            facts = self._facts(s)
        intents: list[str] = []
        for job_id in ids:
            try:
                made = self._step_job(job_id, facts)
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job_id)
                self._step_failed(job_id, e)
                continue
            if made is not None:
                intents.append(made)
        return intents

    def _facts(self, s: Session) -> PassFacts:
        now = self.clock.now()
        cfg = self._config()
        prior = cfg.policy.spot_interruption_prior
        unavailable: dict[str, datetime] = {}
        rates: dict[str, float] = {}
        gang_capacity: dict[str, tuple[int, str]] = {}
        for p in s.exec(select(PoolState)).all():
            if p.gang_capacity is not None and later(p.gang_capacity_until, now):
                gang_capacity[p.pool] = (p.gang_capacity, p.gang_capacity_reason)
            if p.unavailable_until is not None and p.unavailable_until > now:
                unavailable[p.pool] = p.unavailable_until
            if p.interruptions or p.exposure_hours:
                rates[p.pool] = (p.interruptions + prior * PRIOR_HOURS) / (
                    p.exposure_hours + PRIOR_HOURS
                )
        cat = self.catalog.catalog
        return PassFacts(
            now=now,
            unavailable=unavailable,
            rates=rates,
            rate_by_row=rate_column(cat, rates, prior),
            statuses=self.spend.statuses(s, now),
            hold_hours=self.spend.hold_hours(),
            gang_capacity=gang_capacity,
        )

    def _step_job(self, job_id: str, facts: PassFacts) -> str | None:
        now = self.clock.now()
        with self.db.read() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return None
            live = s.exec(
                select(Attempt).where(Attempt.job_id == job_id, col(Attempt.state).in_(LIVE))
            ).first()
            last = s.exec(
                select(Attempt).where(Attempt.job_id == job_id).order_by(col(Attempt.number).desc())
            ).first()
        if live is not None:
            self._step_live(job, live, facts, now)
            return None
        if last is not None and last.end_reason is not None and job.settled_attempt != last.id:
            self._settle(job_id, last, now)
        elif job.cancel_requested:
            self._finish(job_id, JobState.CANCELLED, "cancelled by user", now)
            return None
        elif job.state is JobState.HELD:
            self._maybe_release_hold(job_id, now)
        with self.db.read() as s:
            job = s.get(Job, job_id)
        if job is None or job.state not in (JobState.PENDING, JobState.RECOVERING):
            return None
        if not self.placing or (job.not_before is not None and job.not_before > now):
            return None
        return self._place(job, facts, now)

    # -- running jobs ------------------------------------------------------------------------
    def _step_live(self, job: Job, a: Attempt, facts: PassFacts, now: datetime) -> None:
        progress = None
        if a.state is AttemptState.RUNNING:
            try:
                progress = self.stores.progress(job.checkpoint_uri)
            except StoreError:
                progress = None  # the observe step reports unreadable stores
        with self.db.write() as s:
            job_w = s.get(Job, job.id)
            a_w = s.get(Attempt, a.id)
            if job_w is None or a_w is None or a_w.state not in LIVE:
                return
            if progress:
                step, total = progress.get("step"), progress.get("total_steps")
                if isinstance(step, int) and step != job_w.progress_step:
                    job_w.progress_step = step
                if isinstance(total, int) and total != job_w.total_steps:
                    job_w.total_steps = total
            if job_w.step_failures:
                job_w.step_failures, job_w.last_error = 0, ""
            if job_w.cancel_requested and a_w.stop_requested_at is None:
                request_stop(s, a_w, "cancel", now)
                emit(
                    s,
                    now,
                    "stopping",
                    "cancel requested: checkpointing and stopping",
                    job_id=job.id,
                    attempt_id=a.id,
                )
            elif a_w.stop_requested_at is None:
                if a_w.state is AttemptState.RUNNING and job_w.state is not JobState.RUNNING:
                    job_w.state = JobState.RUNNING
                    job_w.reason = f"on {a_w.pool} at ${a_w.price_per_hour:.2f}/h"
                    job_w.updated_at = now
                elif a_w.state is AttemptState.LAUNCHING and job_w.state not in (
                    JobState.LAUNCHING,
                ):
                    job_w.state = JobState.LAUNCHING
                    job_w.updated_at = now
                if a_w.state is AttemptState.RUNNING and self.placing:
                    spec = JobSpec.model_validate_json(job_w.spec_json)
                    if job_w.deadline is not None and spec.gpu_hours:
                        self._follow_deadline_policy(s, job_w, a_w, facts, now)
                    # A gang moves only when the cloud or its policy moves it: a price move
                    # would restart every node for a per-node saving.
                    if a_w.stop_requested_at is None and spec.migrate != "never" and a_w.nodes == 1:
                        self._follow_prices(s, job_w, a_w, spec, facts, now)
            s.add(job_w)

    def _follow_deadline_policy(
        self, s: Session, job: Job, a: Attempt, facts: PassFacts, now: datetime
    ) -> None:
        """Ask the deadline policy about the running attempt; move it if the policy would run
        elsewhere (back to spot once capacity returns, or to on-demand as slack runs out)."""
        spec = JobSpec.model_validate_json(job.spec_json)
        if not spec.gpu_hours:
            return
        planner = self._planner()
        current = placement_of(a.market, a.zone)
        ran = hours(now - (a.started_at or a.created_at))
        # No budget headroom here: the running attempt's own burn would make its pool look
        # unaffordable to itself; budgets are judged when the next attempt is placed.
        ctx = self._context(s, job, spec, facts, now, with_budget=False)
        advice = self._advise(
            s,
            planner,
            now,
            _deadline_job(job, spec),
            Requirements.from_spec(spec),
            self.catalog.catalog,
            ctx,
            current=current,
            remaining_overhead=max(0.0, planner.restart_overhead - ran),
        )
        if not advice.moves_from(current):
            return
        request_stop(s, a, "policy", now)
        job.reason = f"moving: {advice.reason}"
        job.updated_at = now
        emit(
            s,
            now,
            "policy_move",
            f"from {current} to {advice.action}: {advice.reason}",
            job_id=job.id,
            attempt_id=a.id,
        )

    def _advise(
        self,
        s: Session,
        planner: DeadlinePlanner,
        now: datetime,
        job: DeadlineJob,
        req: Requirements,
        cat: Catalog,
        ctx: PlacementContext,
        current: Action | None = None,
        remaining_overhead: float = 0.0,
    ) -> DeadlineAdvice:
        """planner.advise, with the job's policy restored from (and saved to) its PolicyState
        row: what it learned survives restarts and reloads of the daemon."""
        shape = json.dumps([[str(g) for g in req.gpus], sorted(req.clouds), sorted(req.regions)])
        if not planner.knows(job.job_id):
            row = s.get(PolicyState, job.job_id)
            warm = False
            if row is None:  # a new job: start from the daemon's experience of this shape
                warm = True
                row = s.exec(
                    select(PolicyState)
                    .where(PolicyState.shape == shape, PolicyState.job_id != job.job_id)
                    .order_by(col(PolicyState.updated_at).desc())
                ).first()
            if row is not None and row.policy == planner.policy_name:
                try:
                    state = json.loads(row.state_json)
                    (planner.warm if warm else planner.restore)(job.job_id, state)
                except (ValueError, TypeError, KeyError):
                    log.warning("job %s: unreadable policy state; starting cold", job.job_id)
        advice = planner.advise(job, req, cat, ctx, current, remaining_overhead)
        learned = planner.state(job.job_id)
        if learned is not None:
            mine = s.get(PolicyState, job.job_id) or PolicyState(
                job_id=job.job_id, policy=planner.policy_name, updated_at=now
            )
            mine.policy, mine.shape = planner.policy_name, shape
            mine.state_json, mine.updated_at = json.dumps(learned), now
            s.add(mine)
        return advice

    def _follow_prices(
        self, s: Session, job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, now: datetime
    ) -> None:
        """Move a running attempt whose price no longer pays (scheduler.follow decides). A
        deadline job only leaves a spot price above on-demand here; where else it runs is its
        policy's call, on the next placement."""
        cat = self.catalog.catalog
        code = cat.pools.index.get(a.pool)
        rows = np.flatnonzero(cat.pool == code) if code is not None else np.empty(0, np.intp)
        if len(rows) == 0:
            return  # not in the catalog now: no price to judge it by
        ctx = self._context(s, job, spec, facts, now, with_budget=False)
        per_hour = replace(ctx, remaining_gpu_hours=None)  # expected $ per hour of work
        cur_rate = float(expected_cost(cat, rows[:1], per_hour)[0])
        alt_ctx = replace(per_hour, avoid_pools=ctx.avoid_pools | {a.pool})
        req = Requirements.from_spec(spec)
        best = place(req, cat, alt_ctx)
        ondemand = place(req, cat, replace(alt_ctx, markets=frozenset({Market.ON_DEMAND})))
        od_price = ondemand.offering.price_per_hour if ondemand.offering is not None else None
        price = float(cat.price[rows[0]])
        ran = hours(now - (a.started_at or a.created_at))
        cur = follow.Running(a.pool, a.market == Market.SPOT.value, price, cur_rate, ran)
        alt = None
        if best.offering is not None and best.expected_cost is not None:
            alt = follow.Alternative(
                best.offering.pool, best.offering.price_per_hour, best.expected_cost
            )
        above_on_demand = cur.spot and od_price is not None and price > od_price
        if job.deadline is not None and spec.gpu_hours and not above_on_demand:
            return  # a cheaper pool is the deadline policy's call, not a price move
        # Without an estimate, assume the job runs as long again as it has so far.
        remaining = max(1.0, ran)
        if ctx.remaining_gpu_hours:
            remaining = ctx.remaining_gpu_hours / max(a.gpu_count, 1)
        costs = follow.MoveCosts(
            restart_overhead_hours=ctx.restart_overhead_hours,
            checkpoint_hours=hours(self._config().daemon.stop_grace),
            lost_work_hours=ctx.lost_work_hours,
        )
        pol = self._config().policy
        move = follow.decide(
            cur, alt, od_price, remaining, costs, pol.follow_min_saving, hours(pol.follow_min_gap)
        )
        if move is None:
            return
        request_stop(s, a, "price", now)
        job.reason = f"moving: {move.reason}"
        job.updated_at = now
        emit(
            s,
            now,
            "price_move",
            f"from {a.pool} at ${move.old_price:.2f}/h to {alt.pool if alt else '?'} at "
            f"${move.new_price:.2f}/h: {move.reason}",
            job_id=job.id,
            attempt_id=a.id,
        )

    # -- settling ----------------------------------------------------------------------------
    def _settle(self, job_id: str, last: Attempt, now: datetime) -> None:
        cfg = self._config().daemon
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.settled_attempt == last.id or job.state.terminal:
                return
            assert last.end_reason is not None
            t = settle(
                JobFacts(job.state, job.cancel_requested, job.recoveries, job.failures),
                LastAttempt(last.id, last.end_reason, last.pool, last.exit_code, last.detail),
                Limits(cfg.max_attempts, cfg.max_preemptions),
            )
            job.settled_attempt = last.id
            job.recoveries += t.recoveries
            job.failures += t.failures
            job.updated_at = now
            if t.state is JobState.HELD and job.state is JobState.HELD and job.reason:
                pass  # the budget stop already wrote the full reason and the window
            else:
                job.state, job.reason = t.state, t.reason
            if t.failures:
                delay = backoff_seconds(
                    job.failures, cfg.backoff_base.total_seconds(), cfg.backoff_max.total_seconds()
                )
                job.not_before = now + timedelta(seconds=delay)
            s.add(job)
            emit(s, now, t.event, t.reason, job_id=job.id, attempt_id=last.id, level=t.level)

    def _finish(self, job_id: str, state: JobState, reason: str, now: datetime) -> None:
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return
            job.state, job.reason, job.updated_at = state, reason, now
            s.add(job)
            emit(s, now, state.value.lower(), reason, job_id=job.id)

    def _maybe_release_hold(self, job_id: str, now: datetime) -> None:
        """A budget-HELD job waits until that budget's window resets or its limit is raised
        (or it is removed), so it neither churns at the limit nor waits forever."""
        rules = {r.name: r for r in self._config().budget_rules()}
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state is not JobState.HELD:
                return
            rule = rules.get(job.held_budget or "")
            if rule is not None and rule.hard:
                same_window = budgets.window_start(rule.window, now) == job.held_window_start
                if same_window and rule.limit_usd <= (job.held_limit_usd or 0.0):
                    return
            job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
            job.reason = f"budget '{job.held_budget}' has a new window or limit"
            job.held_budget = job.held_window_start = job.held_limit_usd = None
            job.updated_at = now
            s.add(job)
            emit(s, now, "released", job.reason, job_id=job.id)

    # -- placement ---------------------------------------------------------------------------
    def _context(
        self,
        s: Session,
        job: Job,
        spec: JobSpec,
        facts: PassFacts,
        now: datetime,
        with_budget: bool = True,
    ) -> PlacementContext:
        cfg = self._config()
        recent = now - cfg.daemon.avoid_after_interrupt
        avoid = {
            pool
            for pool, ended in s.exec(
                select(Attempt.pool, Attempt.ended_at).where(
                    Attempt.job_id == job.id, Attempt.end_reason == AttemptEnd.INTERRUPTED
                )
            ).all()
            if ended is not None and ended > recent
        }
        affordable, budget_name = None, ""
        if with_budget:
            affordable, budget_name = budgets.max_affordable_price(
                facts.statuses, job.name, job.team, facts.hold_hours
            )
        remaining = spec.gpu_hours
        if remaining and job.total_steps and job.progress_step:
            remaining = spec.gpu_hours * max(0.0, 1 - job.progress_step / job.total_steps)  # type: ignore[operator]
        return PlacementContext(
            now=now,
            unavailable=facts.unavailable,
            avoid_pools=frozenset(avoid),
            max_affordable_price=affordable,
            budget_name=budget_name,
            remaining_gpu_hours=remaining or None,
            interruption_rate=facts.rates,
            rate_by_row=facts.rate_by_row,
            restart_overhead_hours=hours(cfg.policy.restart_overhead),
            lost_work_hours=hours(spec.checkpoint_interval) / 2,
            gang_capacity=facts.gang_capacity,
        )

    def _place(self, job: Job, facts: PassFacts, now: datetime) -> str | None:
        spec = JobSpec.model_validate_json(job.spec_json)
        req = Requirements.from_spec(spec)
        with self.db.read() as s:
            ctx = self._context(s, job, spec, facts, now)
        if job.deadline is not None and spec.gpu_hours:
            with self.db.write() as s:
                advice = self._advise(
                    s,
                    self._planner(),
                    now,
                    _deadline_job(job, spec),
                    req,
                    self.catalog.catalog,
                    ctx,
                )
            if advice.context is None:
                self._explain(job.id, advice.reason, now)
                return None
            ctx = advice.context
        decision = place(req, self.catalog.catalog, ctx)
        if decision.offering is None:
            self._explain(job.id, decision.reason, now)
            return None
        o = decision.offering
        with self.db.write() as s:
            fresh = s.get(Job, job.id)
            if fresh is None or fresh.state not in (JobState.PENDING, JobState.RECOVERING):
                return None
            if s.exec(
                select(Attempt.id).where(Attempt.job_id == job.id, col(Attempt.state).in_(LIVE))
            ).first():
                return None
            number = fresh.attempts + 1
            attempt_id = f"{fresh.id}-a{number}"
            s.add(
                Attempt(
                    id=attempt_id,
                    job_id=fresh.id,
                    number=number,
                    token=f"{self._config().daemon.owner}-{attempt_id}",
                    provider=self.catalog.provider_of_pool.get(o.pool, o.cloud),
                    cloud=o.cloud,
                    region=o.region,
                    zone=o.zone,
                    instance_type=o.instance_type,
                    market=o.market.value,
                    pool=o.pool,
                    price_per_hour=o.price_per_hour,
                    billed_price=o.price_per_hour,
                    gpu_count=o.gpu_count,
                    nodes=decision.nodes,
                    created_at=now,
                )
            )
            fresh.attempts = number
            fresh.state = JobState.LAUNCHING
            gang = f"{decision.nodes} x " if decision.nodes > 1 else ""
            fresh.reason = f"launching {gang}on {o.pool} at ${o.price_per_hour:.2f}/h"
            if decision.nodes < req.nodes:
                fresh.reason += f" ({decision.reason})"
            fresh.updated_at = now
            s.add(fresh)
            emit(s, now, "launching", fresh.reason, job_id=fresh.id, attempt_id=attempt_id)
        # The next job in this pass sees the smaller headroom (the launch reserves its burn,
        # N x the price for a gang).
        facts.statuses = [
            replace(st, burn_per_hour=st.burn_per_hour + o.price_per_hour * decision.nodes)
            if st.rule.applies_to(job.name, job.team)
            else st
            for st in facts.statuses
        ]
        return attempt_id

    def _explain(self, job_id: str, reason: str, now: datetime) -> None:
        """Record why a job waits (once per distinct reason, not every pass)."""
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is not None and job.reason != reason:
                job.reason, job.updated_at = reason, now
                s.add(job)
                emit(s, now, "waiting", reason, job_id=job_id)

    def _step_failed(self, job_id: str, e: Exception) -> None:
        now = self.clock.now()
        cfg = self._config().daemon
        msg = safe_message(e)
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return
            job.step_failures += 1
            delay = backoff_seconds(
                job.step_failures, cfg.backoff_base.total_seconds(), cfg.backoff_max.total_seconds()
            )
            job.not_before = now + timedelta(seconds=delay)
            if job.step_failures >= cfg.quarantine_after:
                # A job that keeps failing must not keep an instance running (and billed).
                for a in s.exec(
                    select(Attempt).where(Attempt.job_id == job_id, col(Attempt.state).in_(LIVE))
                ).all():
                    request_stop(s, a, "quarantine", now)
                job.state = JobState.FAILED
                job.reason = f"quarantined after {job.step_failures} failed steps: {msg}"
                emit(s, now, "quarantined", job.reason, job_id=job_id, level="error")
            elif msg != job.last_error:
                emit(s, now, "step_failed", msg, job_id=job_id, level="error")
            job.last_error = msg
            s.add(job)


def _deadline_job(job: Job, spec: JobSpec) -> DeadlineJob:
    per_instance = spec.gpu_specs()[0].count * spec.nodes
    progress = 0.0
    if job.total_steps and job.progress_step:
        progress = min(1.0, job.progress_step / job.total_steps)
    assert job.deadline is not None and spec.gpu_hours is not None
    return DeadlineJob(
        job.id, job.created_at, job.deadline, spec.gpu_hours / per_instance, progress
    )
