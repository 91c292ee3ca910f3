"""The per-job state machine: settle ended attempts, place, write intent, launch, adopt."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlmodel import Session, select

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    CapacityUnavailable,
    FatalError,
    Instance,
    LaunchRequest,
    Market,
    Offering,
)
from scheduler import budget as budgets
from scheduler.audit import emit
from scheduler.controllers.base import (
    ACTIVE_JOB_STATES,
    LIVE,
    MAX_LAUNCH_TRIES_PER_PASS,
    ControllerBase,
    CrashForTest,
    hours,
    safe_message,
)
from scheduler.deadline import DeadlineJob, placement_of
from scheduler.jobspec import JobSpec
from scheduler.models import Attempt, AttemptEnd, AttemptState, Job, JobState, PoolState
from scheduler.placement import PlacementContext, Requirements, place
from scheduler.progress import read_progress

log = logging.getLogger("spotwise.reconcile")


class JobController(ControllerBase):
    def _step_jobs(self) -> None:
        with self._session() as s:
            ids = s.exec(select(Job.id).where(Job.state.in_(ACTIVE_JOB_STATES))).all()
        statuses = self._budget_statuses()
        for job_id in ids:
            try:
                if self._step_job(job_id, statuses):
                    # A launch adds burn: the next job must see the smaller headroom.
                    statuses = self._budget_statuses()
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job_id)
                with self._session() as s:
                    emit(
                        s,
                        self.clock.now(),
                        "step_failed",
                        safe_message(e),
                        job_id=job_id,
                        level="error",
                    )
                    s.commit()

    def _step_job(self, job_id: str, statuses: list[budgets.BudgetStatus]) -> bool:
        """Move one job forward; True if it launched something."""
        now = self.clock.now()
        with self._session() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return False
            live = s.exec(
                select(Attempt).where(Attempt.job_id == job_id, Attempt.state.in_(LIVE))
            ).first()
            self._update_progress(job)
            if live is not None:
                self._step_live(s, job, live, now)
                s.commit()
                return False
            last = s.exec(
                select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number.desc())
            ).first()
            if self._settle(s, job, last, now):
                s.commit()
                return False
            s.commit()
        if job.state in (JobState.PENDING, JobState.RECOVERING) and self.placing:
            return self._place_and_launch(job_id, statuses)
        return False

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
        if running and job.deadline is not None and self.placing:
            self._follow_deadline_policy(s, job, a, now)
        stopping = a.state is AttemptState.STOPPING and a.stop_requested_at is not None
        if stopping and now - a.stop_requested_at > self.config.daemon.stop_grace * 2:
            self._terminate(s, a, now)  # ask again; the provider treats it idempotently

    def _follow_deadline_policy(self, s: Session, job: Job, a: Attempt, now: datetime) -> None:
        """Ask the deadline policy about the running attempt; move it if the policy would run
        elsewhere (e.g. back to spot once capacity returns, or to on-demand as slack runs out)."""
        spec = JobSpec.model_validate_json(job.spec_json)
        if not spec.gpu_hours:
            return
        current = placement_of(a.market, a.zone)
        ran = hours(now - (a.started_at or a.created_at))
        # No budget statuses: the budget is judged when the next attempt is placed, not here;
        # the running attempt's own burn would make its pool look unaffordable to itself.
        ctx = self._context(s, job, spec, [], now)
        advice = self.planner.advise(
            _deadline_job(job, spec),
            Requirements.from_spec(spec),
            self.catalogs.catalog,
            ctx,
            current=current,
            remaining_overhead=max(0.0, self.planner.restart_overhead - ran),
        )
        if not advice.moves_from(current):
            return
        self._request_stop(s, a, "policy", now)
        job.reason = f"moving: {advice.reason}"
        job.updated_at = now
        s.add(job)
        move = f"from {current} to {advice.action}: {advice.reason}"
        emit(s, now, "policy_move", move, job_id=job.id, attempt_id=a.id)

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
        if end is AttemptEnd.MIGRATED:
            job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
            return False
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

    def _place_and_launch(self, job_id: str, statuses: list[budgets.BudgetStatus]) -> bool:
        """Place and launch; True once an intent (which reserves budget) has been written."""
        wrote = False
        for _ in range(MAX_LAUNCH_TRIES_PER_PASS):
            now = self.clock.now()
            with self._session() as s:
                job = s.get(Job, job_id)
                if job is None or job.state not in (JobState.PENDING, JobState.RECOVERING):
                    return wrote
                spec = JobSpec.model_validate_json(job.spec_json)
                ctx = self._context(s, job, spec, statuses, now)
                req = Requirements.from_spec(spec)
                if job.deadline is not None and spec.gpu_hours:
                    advice = self.planner.advise(
                        _deadline_job(job, spec), req, self.catalogs.catalog, ctx
                    )
                    if advice.context is None:
                        self._explain(s, job, advice.reason, now)
                        return wrote
                    ctx = advice.context
                decision = place(req, self.catalogs.catalog, ctx)
                if decision.offering is None:
                    self._explain(s, job, decision.reason, now)
                    return wrote
                attempt = self._write_intent(s, job, decision.offering, now)
                s.commit()
                attempt_id, wrote = attempt.id, True
            self._step("after_intent")
            if self._launch(attempt_id):
                return wrote
        return wrote

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
        o = self.catalogs.catalog.offering_for_pool(a.pool) or Offering(
            a.cloud, a.region, a.zone, a.instance_type, "", a.gpu_count, 0, 0, 0,
            Market(a.market), a.price_per_hour, a.created_at,
        )  # fmt: skip
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
                self._mark_unavailable(s, a.pool, safe_message(e), now)
                self._end_launch(s, job, a, f"no capacity: {safe_message(e)}", now)
                s.commit()
            return False
        except FatalError as e:
            with self._session() as s:
                a, job = s.get(Attempt, attempt_id), s.get(Job, request.tags[TAG_JOB])
                self._end_launch(s, job, a, f"launch rejected: {safe_message(e)}", now)
                self._mark_unavailable(s, a.pool, safe_message(e), now)
                s.commit()
            return False
        except Exception as e:
            with self._session() as s:
                emit(
                    s,
                    now,
                    "launch_retry",
                    f"{safe_message(e)}; will retry with the same token",
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
            emit(
                s,
                now,
                "adopt_failed",
                safe_message(e),
                job_id=job.id,
                attempt_id=a.id,
                level="warning",
            )
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


def _deadline_job(job: Job, spec: JobSpec) -> DeadlineJob:
    per_instance = spec.gpu_specs()[0].count
    progress = 0.0
    if job.total_steps and job.progress_step:
        progress = min(1.0, job.progress_step / job.total_steps)
    assert job.deadline is not None and spec.gpu_hours is not None
    return DeadlineJob(
        job.id, job.created_at, job.deadline, spec.gpu_hours / per_instance, progress
    )
