"""The reconcile loop: level-triggered, idempotent steps that move every job toward its goal.

Each pass reads desired state (jobs) and observed state (instances) and steps each job forward.
Every cloud call is preceded by a committed intent (an Attempt row carrying a deterministic
idempotency token), so a crash between any two steps is repaired by the next pass: a LAUNCHING
attempt is adopted by its token or launched again *with the same token*, which the provider
turns into a no-op. Nothing here raises out of a pass because of one job or one API call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FatalError,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Offering,
    Provider,
    ProviderError,
)
from scheduler import budget as budgets
from scheduler.audit import emit
from scheduler.catalog import Catalog
from scheduler.clock import Clock
from scheduler.config import Config
from scheduler.deadline import DeadlineJob, DeadlinePlanner
from scheduler.jobspec import JobSpec
from scheduler.models import (
    Attempt,
    AttemptEnd,
    AttemptState,
    BudgetSpend,
    Job,
    JobState,
    PoolState,
    PriceSample,
)
from scheduler.placement import PlacementContext, Requirements, place
from scheduler.progress import is_done, read_progress

log = logging.getLogger("spotwise.reconcile")

EXIT_PREEMPTED = 75  # the trainer's "preempted, resume me" exit code
LIVE = (AttemptState.LAUNCHING, AttemptState.RUNNING, AttemptState.STOPPING)
ACTIVE_JOB_STATES = (
    JobState.PENDING,
    JobState.LAUNCHING,
    JobState.RUNNING,
    JobState.RECOVERING,
    JobState.HELD,
)
# How many offerings one pass tries for a job after capacity errors before waiting a pass.
MAX_LAUNCH_TRIES_PER_PASS = 4


class CrashForTest(RuntimeError):
    """Raised by a test's crash hook to simulate the daemon dying between two steps."""


@dataclass
class CatalogHolder:
    """The newest catalog and which provider sells each pool; swapped whole, never mutated."""

    catalog: Catalog = field(default_factory=Catalog.empty)
    provider_of_pool: dict[str, str] = field(default_factory=dict)


def hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


class Reconciler:
    def __init__(
        self,
        engine: Engine,
        config: Config,
        providers: Mapping[str, Provider],
        clock: Clock,
        *,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.config = config
        self.providers = dict(providers)
        self.clock = clock
        self.catalogs = CatalogHolder()
        self.placing = True  # cleared on SIGTERM: finish in-flight work, start nothing new
        self._crash_hook = crash_hook
        self._lock = threading.RLock()  # reconcile and accrue mutate the same rows
        self._orphans_seen: dict[str, datetime] = {}
        self.planner = DeadlinePlanner(
            config.policy.deadline_policy,
            hours(config.policy.restart_overhead),
            hours(config.daemon.reconcile_interval),
        )

    def _session(self) -> Session:
        # Objects stay readable after commit: a pass reads them across short transactions.
        return Session(self.engine, expire_on_commit=False)

    # -- test seam ------------------------------------------------------------------------------
    def _step(self, name: str) -> None:
        if self._crash_hook is not None:
            self._crash_hook(name)

    @property
    def owner(self) -> str:
        return self.config.daemon.owner

    # -- prices ---------------------------------------------------------------------------------
    def poll_prices(self) -> None:
        """Refresh offerings from every provider; a failing provider keeps its last offerings."""
        now = self.clock.now()
        old = self.catalogs
        by_provider: dict[str, list[Offering]] = {}
        for name, provider in self.providers.items():
            try:
                by_provider[name] = provider.offerings()
            except Exception as e:  # a provider bug must not take the daemon down
                keep = [
                    o for i, o in enumerate(old.catalog) if old.provider_of_pool.get(o.pool) == name
                ]
                by_provider[name] = keep
                with self._session() as s:
                    emit(s, now, "prices_failed", f"{name}: {_safe(e)}", level="warning")
                    s.commit()
            drain = getattr(provider, "drain_events", None)
            if callable(drain):
                messages = drain()
                if messages:
                    with self._session() as s:
                        for m in messages:
                            emit(s, now, "provider", f"{name}: {m}", level="warning")
                        s.commit()
        offerings: list[Offering] = []
        provider_of: dict[str, str] = {}
        for name, offs in by_provider.items():
            for o in offs:
                if provider_of.setdefault(o.pool, name) == name:
                    offerings.append(o)
        self._record_price_changes(old.catalog, offerings, now)
        self.catalogs = CatalogHolder(Catalog(offerings), provider_of)

    def _record_price_changes(self, old: Catalog, new: list[Offering], now: datetime) -> None:
        before = {o.pool: o.price_per_hour for o in old}
        changed = [o for o in new if before.get(o.pool) != o.price_per_hour]
        if not changed:
            return
        with self._session() as s:
            for o in changed:
                s.add(
                    PriceSample(
                        observed_at=now,
                        cloud=o.cloud,
                        region=o.region,
                        zone=o.zone,
                        instance_type=o.instance_type,
                        market=o.market.value,
                        price_per_hour=o.price_per_hour,
                        pool=o.pool,
                    )
                )
            s.commit()

    # -- the pass -------------------------------------------------------------------------------
    def reconcile(self) -> None:
        with self._lock:
            self._observe_attempts()
            self._step_jobs()
            self._collect_leaks()

    def _observe_attempts(self) -> None:
        """Bring every live attempt in line with what its provider reports."""
        now = self.clock.now()
        with self._session() as s:
            live = s.exec(select(Attempt).where(Attempt.state.in_(LIVE))).all()
            by_provider: dict[str, list[Attempt]] = {}
            for a in live:
                if a.instance_id is not None:
                    by_provider.setdefault(a.provider, []).append(a)
            for name, attempts in by_provider.items():
                provider = self.providers.get(name)
                if provider is None:
                    continue
                try:
                    seen = {i.id: i for i in provider.describe([a.instance_id for a in attempts])}
                except ProviderError as e:
                    emit(s, now, "describe_failed", f"{name}: {_safe(e)}", level="warning")
                    continue
                except Exception as e:
                    emit(s, now, "describe_failed", f"{name}: {_safe(e)}", level="error")
                    continue
                for a in attempts:
                    inst = seen.get(a.instance_id or "")
                    if inst is not None:
                        self._apply_observation(s, a, inst, now)
            s.commit()

    def _apply_observation(self, s: Session, a: Attempt, inst: Instance, now: datetime) -> None:
        if inst.state is not InstanceState.ENDED:
            if a.state is AttemptState.LAUNCHING:
                a.state = AttemptState.RUNNING
            if inst.notice_at is not None and a.stop_reason != "notice":
                a.stop_reason = a.stop_reason or "notice"
                emit(
                    s,
                    now,
                    "interruption_notice",
                    f"{a.pool}: the cloud will reclaim {a.instance_id}; the job is checkpointing",
                    job_id=a.job_id,
                    attempt_id=a.id,
                    level="warning",
                )
            s.add(a)
            return
        job = s.get(Job, a.job_id)
        end = self._end_reason(a, inst, job)
        a.state = AttemptState.ENDED
        a.ended_at = inst.ended_at or now
        a.end_reason = end
        a.exit_code = inst.exit_code
        a.cost_usd = self._attempt_cost(a, a.ended_at)
        s.add(a)
        if job is not None:
            job.cost_usd = self._job_cost(s, job.id, now)
            s.add(job)
        self._learn_pool(s, a, end)
        emit(
            s,
            now,
            f"attempt_{end.value}",
            f"{a.instance_id} on {a.pool} ended: {end.value}"
            + (f" (exit {inst.exit_code})" if inst.exit_code is not None else ""),
            job_id=a.job_id,
            attempt_id=a.id,
            level="warning" if end in (AttemptEnd.INTERRUPTED, AttemptEnd.LOST) else "info",
        )

    def _end_reason(self, a: Attempt, inst: Instance, job: Job | None) -> AttemptEnd:
        done = job is not None and is_done(job.checkpoint_uri)
        if a.stop_requested_at is not None and not done:
            # We stopped it; a trainer that checkpointed on our SIGTERM may exit "preempted".
            return AttemptEnd.BUDGET if a.stop_reason == "budget" else AttemptEnd.CANCELLED
        if inst.end_reason is EndReason.INTERRUPTED:
            return AttemptEnd.FINISHED if done else AttemptEnd.INTERRUPTED
        if inst.end_reason is EndReason.EXITED:
            if inst.exit_code == 0 or (inst.exit_code is None and done):
                return AttemptEnd.FINISHED
            if inst.exit_code == EXIT_PREEMPTED:
                return AttemptEnd.INTERRUPTED
            return AttemptEnd.FAILED
        return AttemptEnd.FINISHED if done else AttemptEnd.LOST

    def _learn_pool(self, s: Session, a: Attempt, end: AttemptEnd) -> None:
        if a.market != Market.SPOT.value:
            return
        ps = s.get(PoolState, a.pool) or PoolState(pool=a.pool)
        start = a.started_at or a.created_at
        ps.exposure_hours += max(0.0, hours((a.ended_at or start) - start))
        if end is AttemptEnd.INTERRUPTED:
            ps.interruptions += 1
            ps.last_interrupted_at = a.ended_at
        s.add(ps)

    def _attempt_cost(self, a: Attempt, until: datetime) -> float:
        if a.started_at is None:
            return 0.0
        return round(a.price_per_hour * max(0.0, hours(until - a.started_at)), 6)

    # -- per-job state machine ------------------------------------------------------------------
    def _step_jobs(self) -> None:
        with self._session() as s:
            ids = s.exec(select(Job.id).where(Job.state.in_(ACTIVE_JOB_STATES))).all()
        statuses = self._budget_statuses()
        for job_id in ids:
            try:
                self._step_job(job_id, statuses)
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job_id)
                with self._session() as s:
                    emit(s, self.clock.now(), "step_failed", _safe(e), job_id=job_id, level="error")
                    s.commit()

    def _step_job(self, job_id: str, statuses: list[budgets.BudgetStatus]) -> None:
        now = self.clock.now()
        with self._session() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return
            live = s.exec(
                select(Attempt).where(Attempt.job_id == job_id, Attempt.state.in_(LIVE))
            ).first()
            self._update_progress(job)
            if live is not None:
                self._step_live(s, job, live, now)
                s.commit()
                return
            last = s.exec(
                select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number.desc())
            ).first()
            if self._settle(s, job, last, now):
                s.commit()
                return
            s.commit()
        if job.state in (JobState.PENDING, JobState.RECOVERING) and self.placing:
            self._place_and_launch(job_id, statuses)

    def _update_progress(self, job: Job) -> None:
        p = read_progress(job.checkpoint_uri)
        if p:
            step, total = p.get("step"), p.get("total_steps")
            job.progress_step = step if isinstance(step, int) else job.progress_step
            job.total_steps = total if isinstance(total, int) else job.total_steps

    def _step_live(self, s: Session, job: Job, a: Attempt, now: datetime) -> None:
        if job.cancel_requested and a.stop_requested_at is None:
            self._request_stop(s, a, "cancel", now)
            return
        if a.state is AttemptState.LAUNCHING and a.instance_id is None:
            # Crashed between intent and record: adopt by token, else relaunch with the same
            # token (idempotent), unless it has been stuck for too long.
            self._resume_launch(s, job, a, now)
            return
        running = a.state is AttemptState.RUNNING and a.stop_requested_at is None
        if running and job.state is not JobState.RUNNING:
            job.state, job.reason = JobState.RUNNING, f"on {a.pool} at ${a.price_per_hour:.2f}/h"
            job.updated_at = now
            s.add(job)
        stopping = a.state is AttemptState.STOPPING and a.stop_requested_at is not None
        if stopping and now - a.stop_requested_at > self.config.daemon.stop_grace * 2:
            self._terminate(s, a, now)  # ask again; the provider treats it idempotently

    def _settle(self, s: Session, job: Job, last: Attempt | None, now: datetime) -> bool:
        """Decide a job's next state from its latest ended attempt. True if nothing to place."""
        if job.cancel_requested:
            self._finish(s, job, JobState.CANCELLED, "cancelled by user", now)
            return True
        if last is None or last.end_reason is None or job.settled_attempt == last.id:
            if job.state is JobState.HELD:
                return self._maybe_release_hold(s, job, now)
            return False
        job.settled_attempt = last.id
        job.updated_at = now
        s.add(job)
        end = last.end_reason
        if end is AttemptEnd.FINISHED:
            self._finish(s, job, JobState.SUCCEEDED, "finished", now)
            return True
        if end is AttemptEnd.FAILED:
            self._finish(s, job, JobState.FAILED, f"the job exited with code {last.exit_code}", now)
            return True
        if end is AttemptEnd.CANCELLED:
            self._finish(s, job, JobState.CANCELLED, "cancelled by user", now)
            return True
        if end is AttemptEnd.BUDGET:
            job.state = JobState.HELD
            if not job.reason.startswith("hard budget"):
                job.reason = "hard budget exhausted"
            return True
        if end in (AttemptEnd.INTERRUPTED, AttemptEnd.LOST):
            if job.recoveries >= self.config.daemon.max_attempts:
                why = f"gave up after {job.recoveries} recoveries"
                self._finish(s, job, JobState.FAILED, why, now)
                return True
            job.recoveries += 1
            job.state = JobState.RECOVERING
            job.reason = f"{end.value} on {last.pool}; resuming from its checkpoint"
            emit(
                s, now, "recovering", job.reason, job_id=job.id, attempt_id=last.id, level="warning"
            )
        else:  # launch_failed: the next pass tries the next offering
            job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
        return False

    def _maybe_release_hold(self, s: Session, job: Job, now: datetime) -> bool:
        """A budget-HELD job waits until that budget's window resets or its limit is raised
        (or it is removed), so it neither churns at the limit nor waits forever."""
        rule = next((r for r in self.config.budget_rules() if r.name == job.held_budget), None)
        if rule is not None and rule.hard:
            same_window = budgets.window_start(rule.window, now) == job.held_window_start
            if same_window and rule.limit_usd <= (job.held_limit_usd or 0.0):
                return True
        job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
        job.reason = f"budget '{job.held_budget}' has a new window or limit"
        job.held_budget = job.held_window_start = job.held_limit_usd = None
        job.updated_at = now
        emit(s, now, "released", job.reason, job_id=job.id)
        s.add(job)
        return False

    def _finish(self, s: Session, job: Job, state: JobState, reason: str, now: datetime) -> None:
        job.state, job.reason, job.updated_at = state, reason, now
        job.cost_usd = self._job_cost(s, job.id, now)
        s.add(job)
        emit(s, now, state.value.lower(), reason, job_id=job.id)

    def _job_cost(self, s: Session, job_id: str, now: datetime) -> float:
        total = 0.0
        for a in s.exec(select(Attempt).where(Attempt.job_id == job_id)).all():
            total += a.cost_usd if a.state is AttemptState.ENDED else self._attempt_cost(a, now)
        return round(total, 6)

    # -- placement and launch -------------------------------------------------------------------
    def _hold_hours(self) -> float:
        d = self.config.daemon
        return hours(d.accrue_interval + d.stop_grace)

    def _context(self, s: Session, job: Job, spec: JobSpec, statuses, now: datetime):
        pools = s.exec(select(PoolState)).all()
        prior = self.config.policy.spot_interruption_prior
        prior_h = 10.0
        unavailable = {
            p.pool: p.unavailable_until for p in pools if p.unavailable_until is not None
        }
        rates = {
            p.pool: (p.interruptions + prior * prior_h) / (p.exposure_hours + prior_h)
            for p in pools
            if p.interruptions or p.exposure_hours
        }
        avoid = set()
        recent = now - self.config.daemon.avoid_after_interrupt
        for a in s.exec(
            select(Attempt).where(
                Attempt.job_id == job.id, Attempt.end_reason == AttemptEnd.INTERRUPTED
            )
        ).all():
            if a.ended_at is not None and a.ended_at > recent:
                avoid.add(a.pool)
        affordable, budget_name = budgets.max_affordable_price(
            statuses, job.name, job.team, self._hold_hours()
        )
        remaining = spec.gpu_hours
        if remaining and job.total_steps and job.progress_step:
            remaining = spec.gpu_hours * max(0.0, 1 - job.progress_step / job.total_steps)
        return PlacementContext(
            now=now,
            unavailable=unavailable,
            avoid_pools=frozenset(avoid),
            max_affordable_price=affordable,
            budget_name=budget_name,
            remaining_gpu_hours=remaining or None,
            interruption_rate=rates,
            restart_overhead_hours=hours(self.config.policy.restart_overhead),
            lost_work_hours=hours(spec.checkpoint_interval) / 2,
        )

    def _place_and_launch(self, job_id: str, statuses: list[budgets.BudgetStatus]) -> None:
        for _ in range(MAX_LAUNCH_TRIES_PER_PASS):
            now = self.clock.now()
            with self._session() as s:
                job = s.get(Job, job_id)
                if job is None or job.state not in (JobState.PENDING, JobState.RECOVERING):
                    return
                spec = JobSpec.model_validate_json(job.spec_json)
                ctx = self._context(s, job, spec, statuses, now)
                req = Requirements.from_spec(spec)
                if job.deadline is not None and spec.gpu_hours:
                    advice = self.planner.advise(
                        _deadline_job(job, spec), req, self.catalogs.catalog, ctx
                    )
                    if advice.context is None:
                        self._explain(s, job, advice.reason, now)
                        return
                    ctx = advice.context
                decision = place(req, self.catalogs.catalog, ctx)
                if decision.offering is None:
                    self._explain(s, job, decision.reason, now)
                    return
                attempt = self._write_intent(s, job, decision.offering, now)
                s.commit()
                attempt_id = attempt.id
            self._step("after_intent")
            if self._launch(attempt_id):
                return

    def _explain(self, s: Session, job: Job, reason: str, now: datetime) -> None:
        """Record why a job waits (once per distinct reason, not every pass)."""
        if job.reason != reason:
            job.reason, job.updated_at = reason, now
            emit(s, now, "waiting", reason, job_id=job.id)
            s.add(job)
            s.commit()

    def _write_intent(self, s: Session, job: Job, o: Offering, now: datetime) -> Attempt:
        number = job.attempts + 1
        attempt_id = f"{job.id}-a{number}"
        a = Attempt(
            id=attempt_id,
            job_id=job.id,
            number=number,
            token=f"{self.owner}-{attempt_id}",
            provider=self.catalogs.provider_of_pool.get(o.pool, o.cloud),
            cloud=o.cloud,
            region=o.region,
            zone=o.zone,
            instance_type=o.instance_type,
            market=o.market.value,
            pool=o.pool,
            price_per_hour=o.price_per_hour,
            gpu_count=o.gpu_count,
            created_at=now,
        )
        job.attempts = number
        job.state = JobState.LAUNCHING
        job.reason = f"launching on {o.pool} at ${o.price_per_hour:.2f}/h"
        job.updated_at = now
        s.add(a)
        s.add(job)
        emit(s, now, "launching", job.reason, job_id=job.id, attempt_id=attempt_id)
        return a

    def _request(self, job: Job, a: Attempt) -> LaunchRequest:
        spec = JobSpec.model_validate_json(job.spec_json)
        o = next(
            (x for x in self.catalogs.catalog if x.pool == a.pool),
            None,
        ) or Offering(
            a.cloud,
            a.region,
            a.zone,
            a.instance_type,
            "",
            a.gpu_count,
            0,
            0,
            0,
            Market(a.market),
            a.price_per_hour,
            a.created_at,
        )
        env = dict(spec.env)
        env.update(
            SPOTWISE_JOB_ID=job.id,
            SPOTWISE_ATTEMPT=str(a.number),
            SPOTWISE_CHECKPOINT_URI=job.checkpoint_uri,
            SPOTWISE_CLOUD=a.cloud,
        )
        tags = {TAG_JOB: job.id, TAG_ATTEMPT: a.id, TAG_OWNER: self.owner}
        return LaunchRequest(token=a.token, offering=o, command=spec.command, env=env, tags=tags)

    def _launch(self, attempt_id: str) -> bool:
        """Call the cloud for a LAUNCHING attempt. True when the job needs no other try now."""
        now = self.clock.now()
        with self._session() as s:
            a = s.get(Attempt, attempt_id)
            job = s.get(Job, a.job_id) if a else None
            if a is None or job is None:
                return True
            provider = self.providers.get(a.provider)
            if provider is None:
                self._end_launch(s, job, a, f"provider {a.provider} is not configured", now)
                s.commit()
                return False
            request = self._request(job, a)
        try:
            inst = provider.launch(request)
        except CapacityUnavailable as e:
            with self._session() as s:
                a, job = s.get(Attempt, attempt_id), s.get(Job, request.tags[TAG_JOB])
                self._mark_unavailable(s, a.pool, _safe(e), now)
                self._end_launch(s, job, a, f"no capacity: {_safe(e)}", now)
                s.commit()
            return False
        except FatalError as e:
            with self._session() as s:
                a, job = s.get(Attempt, attempt_id), s.get(Job, request.tags[TAG_JOB])
                self._end_launch(s, job, a, f"launch rejected: {_safe(e)}", now)
                self._mark_unavailable(s, a.pool, _safe(e), now)
                s.commit()
            return False
        except Exception as e:
            with self._session() as s:
                emit(
                    s,
                    now,
                    "launch_retry",
                    f"{_safe(e)}; will retry with the same token",
                    job_id=request.tags[TAG_JOB],
                    attempt_id=attempt_id,
                    level="warning",
                )
                s.commit()
            return True
        self._step("after_launch")
        with self._session() as s:
            a = s.get(Attempt, attempt_id)
            job = s.get(Job, a.job_id)
            self._record_instance(s, job, a, inst, now)
            s.commit()
        self._step("after_record")
        return True

    def _record_instance(
        self, s: Session, job: Job, a: Attempt, inst: Instance, now: datetime
    ) -> None:
        a.instance_id = inst.id
        a.state = AttemptState.RUNNING
        a.started_at = a.started_at or now
        job.state = JobState.RUNNING
        job.reason = f"on {a.pool} at ${a.price_per_hour:.2f}/h"
        job.updated_at = now
        s.add(a)
        s.add(job)
        emit(
            s,
            now,
            "launched",
            f"{inst.id} on {a.pool} ({a.market})",
            job_id=job.id,
            attempt_id=a.id,
        )

    def _resume_launch(self, s: Session, job: Job, a: Attempt, now: datetime) -> None:
        provider = self.providers.get(a.provider)
        if provider is None:
            self._end_launch(s, job, a, f"provider {a.provider} is not configured", now)
            return
        try:
            inst = provider.find_by_token(a.token)
        except Exception as e:
            emit(s, now, "adopt_failed", _safe(e), job_id=job.id, attempt_id=a.id, level="warning")
            return
        if inst is not None:
            emit(
                s,
                now,
                "adopted",
                f"found {inst.id} by token {a.token}",
                job_id=job.id,
                attempt_id=a.id,
            )
            self._record_instance(s, job, a, inst, now)
            return
        if now - a.created_at > self.config.daemon.launch_timeout:
            self._end_launch(s, job, a, "launch did not complete in time", now)
            return
        s.commit()
        self._launch(a.id)

    def _end_launch(self, s: Session, job: Job, a: Attempt, why: str, now: datetime) -> None:
        a.state, a.end_reason, a.ended_at = AttemptState.ENDED, AttemptEnd.LAUNCH_FAILED, now
        job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
        job.reason = why
        job.updated_at = now
        s.add(a)
        s.add(job)
        emit(s, now, "launch_failed", why, job_id=job.id, attempt_id=a.id, level="warning")

    def _mark_unavailable(self, s: Session, pool: str, why: str, now: datetime) -> None:
        ps = s.get(PoolState, pool) or PoolState(pool=pool)
        ps.unavailable_until = now + self.config.daemon.unavailable_ttl
        ps.unavailable_reason = why
        s.add(ps)
        emit(s, now, "pool_unavailable", f"{pool} until {ps.unavailable_until:%H:%M:%S}Z: {why}")

    # -- stopping -------------------------------------------------------------------------------
    def _request_stop(self, s: Session, a: Attempt, reason: str, now: datetime) -> None:
        a.stop_requested_at, a.stop_reason = now, reason
        if a.instance_id is None:
            a.state, a.end_reason, a.ended_at = (
                AttemptState.ENDED,
                AttemptEnd.BUDGET if reason == "budget" else AttemptEnd.CANCELLED,
                now,
            )
            s.add(a)
            return
        a.state = AttemptState.STOPPING
        s.add(a)
        self._terminate(s, a, now)

    def _terminate(self, s: Session, a: Attempt, now: datetime) -> None:
        provider = self.providers.get(a.provider)
        if provider is None or a.instance_id is None:
            return
        try:
            provider.terminate([a.instance_id])
            emit(
                s,
                now,
                "stopping",
                f"{a.instance_id}: {a.stop_reason}",
                job_id=a.job_id,
                attempt_id=a.id,
            )
        except Exception as e:
            emit(
                s,
                now,
                "terminate_failed",
                _safe(e),
                job_id=a.job_id,
                attempt_id=a.id,
                level="warning",
            )

    # -- leaks ----------------------------------------------------------------------------------
    def _collect_leaks(self) -> None:
        """Terminate instances carrying our owner tag that match no live attempt (after a grace)."""
        now = self.clock.now()
        with self._session() as s:
            live = {
                a.id: a.instance_id
                for a in s.exec(select(Attempt).where(Attempt.state.in_(LIVE))).all()
            }
            for name, provider in self.providers.items():
                try:
                    tagged = provider.list_tagged(self.owner)
                except Exception as e:
                    emit(s, now, "list_failed", f"{name}: {_safe(e)}", level="warning")
                    continue
                for inst in tagged:
                    if inst.state is InstanceState.ENDED:
                        continue
                    attempt_id = inst.tags.get(TAG_ATTEMPT, "")
                    if attempt_id in live and live[attempt_id] in (None, inst.id):
                        self._orphans_seen.pop(inst.id, None)
                        continue
                    first = self._orphans_seen.setdefault(inst.id, now)
                    if now - first < self.config.daemon.leak_grace:
                        continue
                    try:
                        provider.terminate([inst.id])
                    except Exception as e:
                        emit(s, now, "terminate_failed", f"{inst.id}: {_safe(e)}", level="warning")
                        continue
                    self._orphans_seen.pop(inst.id, None)
                    emit(
                        s,
                        now,
                        "leak_terminated",
                        f"{inst.id} ({inst.pool}) carried our tags but no live attempt "
                        f"({attempt_id or 'untagged'})",
                        job_id=inst.tags.get(TAG_JOB),
                        level="warning",
                    )
            s.commit()

    # -- spend and budgets ----------------------------------------------------------------------
    def _spends(self, s: Session) -> list[budgets.Spend]:
        rows = s.exec(select(Attempt, Job).where(Attempt.job_id == Job.id)).all()
        return [
            budgets.Spend(j.name, j.team, a.price_per_hour, a.started_at, a.ended_at)
            for a, j in rows
            if a.started_at is not None
        ]

    def _budget_statuses(self) -> list[budgets.BudgetStatus]:
        now = self.clock.now()
        with self._session() as s:
            spends = self._spends(s)
        return [budgets.status(rule, spends, now) for rule in self.config.budget_rules()]

    def accrue(self) -> None:
        """Accrue spend on running attempts, publish budget state and enforce hard budgets."""
        with self._lock:
            now = self.clock.now()
            with self._session() as s:
                running = s.exec(
                    select(Attempt).where(Attempt.state.in_(LIVE), Attempt.started_at.is_not(None))
                ).all()
                touched: set[str] = set()
                for a in running:
                    a.cost_usd = self._attempt_cost(a, now)
                    s.add(a)
                    touched.add(a.job_id)
                for job_id in touched:
                    job = s.get(Job, job_id)
                    if job is not None:
                        job.cost_usd = self._job_cost(s, job_id, now)
                        s.add(job)
                s.commit()
                spends = self._spends(s)
                hold = self._hold_hours()
                for rule in self.config.budget_rules():
                    st = budgets.status(rule, spends, now)
                    before, after = self._publish_budget(s, st, now)
                    if budgets.must_stop(st, hold):
                        self._stop_for_budget(s, st, now)
                    elif budgets.soft_exceeded(st) and before != after:
                        msg = (
                            f"soft budget '{rule.name}' spent ${st.spent:.2f} "
                            f"of ${rule.limit_usd:.2f}"
                        )
                        emit(s, now, "budget_warning", msg, level="warning")
                s.commit()

    def _publish_budget(
        self, s: Session, st: budgets.BudgetStatus, now: datetime
    ) -> tuple[str, str]:
        """Materialise the budget's spend for the CLI; returns its state before and after."""
        rule = st.rule
        row = s.get(BudgetSpend, rule.name) or BudgetSpend(
            name=rule.name, scope=rule.scope, window=rule.window.value,
            limit_usd=rule.limit_usd, hard=rule.hard, updated_at=now,
        )  # fmt: skip
        before = row.state
        row.scope, row.window, row.limit_usd, row.hard = (
            rule.scope, rule.window.value, rule.limit_usd, rule.hard,
        )  # fmt: skip
        row.window_start = budgets.window_start(rule.window, now)
        row.spent_usd = round(st.spent, 6)
        row.burn_per_hour = st.burn_per_hour
        if st.exhausted:
            row.state = "exhausted"
        elif st.spent > 0.8 * rule.limit_usd:
            row.state = "warning"
        else:
            row.state = "ok"
        row.updated_at = now
        s.add(row)
        return before, row.state

    def _stop_for_budget(self, s: Session, st: budgets.BudgetStatus, now: datetime) -> None:
        rows = s.exec(
            select(Attempt, Job).where(
                Attempt.job_id == Job.id,
                Attempt.state.in_((AttemptState.LAUNCHING, AttemptState.RUNNING)),
            )
        ).all()
        for a, job in rows:
            if not st.rule.applies_to(job.name, job.team):
                continue
            why = (
                f"hard budget '{st.rule.name}' (${st.rule.limit_usd:.2f}/{st.rule.window.value}) "
                f"would be exceeded: ${st.spent:.2f} spent"
            )
            self._request_stop(s, a, "budget", now)
            job.state, job.reason, job.updated_at = JobState.HELD, why, now
            job.held_budget = st.rule.name
            job.held_window_start = budgets.window_start(st.rule.window, now)
            job.held_limit_usd = st.rule.limit_usd
            s.add(job)
            emit(
                s,
                now,
                "budget_stop",
                why + "; checkpointing and stopping",
                job_id=job.id,
                attempt_id=a.id,
                level="warning",
            )


def _deadline_job(job: Job, spec: JobSpec) -> DeadlineJob:
    per_instance = spec.gpu_specs()[0].count
    progress = 0.0
    if job.total_steps and job.progress_step:
        progress = min(1.0, job.progress_step / job.total_steps)
    assert job.deadline is not None and spec.gpu_hours is not None
    return DeadlineJob(
        job.id, job.created_at, job.deadline, spec.gpu_hours / per_instance, progress
    )


def _safe(e: BaseException) -> str:
    """One line for the audit log; providers guarantee no credentials in their messages."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:500]
