"""The job controller: one pass over every active job, composed of one phase per module.

A pass reads every job it steps with what the decisions need in a few queries
(`snapshot`), then every progress.json it needs in one concurrent batch with a deadline,
outside every database transaction (`checkpoints.ProgressReader`); writes the next state of
every job whose attempt ended (`ends`); steps each job in memory: a running one
(`running`), a held one (`holds`), a waiting one (`placing`); and writes what it decided in
batched transactions (`writes`), so its cost is a constant per job, not a few round trips
per job. No cloud I/O here: an intent becomes a cloud call in the LaunchController.

One job's failure never stops the others: a batch that fails is written again job by job,
and a job whose step keeps failing is backed off exponentially and quarantined (FAILED,
with the reason) after `quarantine_after` failures in a row; the event is written when the
reason changes, not every pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.deadline import DeadlinePlanner
from scheduler.core.lifecycle import backoff_seconds
from scheduler.core.states import AttemptState, JobState
from scheduler.daemon.checkpoints import CheckpointStores, ProgressReader, StoreError
from scheduler.daemon.controllers.base import (
    LIVE,
    WRITE_BATCH,
    CatalogHolder,
    Db,
    collections_paused,
    safe_message,
)
from scheduler.daemon.controllers.job import handover, intervals, signals
from scheduler.daemon.controllers.job.ends import AttemptEnds
from scheduler.daemon.controllers.job.holds import BudgetHolds
from scheduler.daemon.controllers.job.placing import Placement
from scheduler.daemon.controllers.job.running import RunningJobs
from scheduler.daemon.controllers.job.snapshot import (
    PassFacts,
    Snapshot,
    read_active_jobs,
    read_facts,
    read_snapshot,
)
from scheduler.daemon.controllers.job.writes import DecisionWriter, PassWrites
from scheduler.daemon.controllers.spend import SpendController, request_stop
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job

log = logging.getLogger("spotwise.reconcile")


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
        self._config = config
        self.placing = True  # cleared on SIGTERM: finish in-flight work, start nothing new
        self.progress_reader = ProgressReader(stores)
        self._planner = planner
        self.ends = AttemptEnds(db, config, lambda job_id: self._planner().forget(job_id))
        self.holds = BudgetHolds(db, config)
        self.running = RunningJobs(config, planner, lambda: self.placing)
        self.placement = Placement(db, config, planner)
        self.writer = DecisionWriter(
            db, catalog, config, self.running.apply, self.holds.write, self._step_failed
        )

    # -- the pass ----------------------------------------------------------------------------
    def step(self, only: list[str] | None = None) -> list[str]:
        """Step every active job (or `only` these); returns the attempt ids of new intents."""
        with collections_paused():
            return self._step(only)

    def _step(self, only: list[str] | None) -> list[str]:
        with self.db.read() as s:
            jobs = read_active_jobs(s, only)
            if not jobs:
                return []  # an idle daemon's pass: one query
            facts = self._facts(s)
            avoid_after = self._config().daemon.avoid_after_interrupt
            snap = read_snapshot(s, jobs, only, facts, avoid_after)
        # Store I/O once the database is let go: every read of the pass at once.
        snap.progress = self.progress_reader.read(snap.progress_to_read())
        self.ends.write_next_states(snap, facts.now)
        self.ends.write_replaced_ends(snap, facts.now)
        intents: list[str] = []
        writes = PassWrites()
        for job in snap.jobs:
            try:
                self._step_job(job, snap, facts, writes)
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job.id)
                self._step_failed(job.id, e)
                continue
            if len(writes) >= WRITE_BATCH:
                intents.extend(self.writer.flush(writes, facts))
                writes = PassWrites()
        intents.extend(self.writer.flush(writes, facts))
        return intents

    def _facts(self, s: Session) -> PassFacts:
        return read_facts(s, self.clock.now(), self._config(), self.catalog, self.spend)

    def _step_job(self, job: Job, snap: Snapshot, facts: PassFacts, writes: PassWrites) -> None:
        now = self.clock.now()
        live = snap.live.get(job.id)
        if live is not None:
            if (
                live.state is AttemptState.RUNNING
                and live.stop_requested_at is None
                and facts.spec_problem(job.spec_json) is None  # else it runs on, as it is
            ):
                try:
                    progress = snap.progress.progress(job.id)
                except StoreError:
                    progress = None
                intervals.follow(
                    self.db, self.stores, self._config(), job, live, progress, facts, now
                )
            update = self.running.update(job, live, snap.progress, facts, now)
            if update is not None:
                writes.live.append(update)
            limit = self._config().daemon.max_preemptions
            if self.placing and handover.may_place_beside(job, live, snap, facts, now, limit):
                self.placement.place(job, facts, now, writes, beside=live)
            return
        last = snap.last.get(job.id)
        fresh: Job | None = job
        if job.id in snap.next_state_written:
            pass  # its last attempt's end was acted on in a batch this pass: on to placement
        elif last is not None and last.end_reason is not None and job.settled_attempt != last.id:
            self.ends.write_next_state_alone(job, last, now, snap.progress)  # its batch failed
            fresh = self._reread(job.id)
        elif job.cancel_requested:
            self._finish(job.id, JobState.CANCELLED, "cancelled by user", now)
            return
        elif job.state is JobState.HELD:
            spent = {st.rule.name: st.spent for st in facts.statuses}
            if self.holds.hold_ends(job, now, spent) is None:
                return  # most held jobs stay held: no write to find that out
            self.holds.release(job.id, now, spent)
            fresh = self._reread(job.id)
        if fresh is None or fresh.state not in (JobState.PENDING, JobState.RECOVERING):
            return
        problem = facts.spec_problem(fresh.spec_json)
        if problem is not None:  # it can never be placed: said now, not after quarantine
            self._finish(fresh.id, JobState.FAILED, problem, now, kind="spec_invalid")
            return
        if not self.placing or (fresh.not_before is not None and fresh.not_before > now):
            return
        spec = facts.spec(fresh.spec_json)
        if signals.may_be_over_duration(fresh, spec, now):
            with self.db.read() as s:
                over = signals.over_duration(s, fresh, spec, now)
            if over:  # waiting past its cap: never launched again
                self._finish(fresh.id, JobState.FAILED, over, now)
                return
        self.placement.place(fresh, facts, now, writes)

    def _reread(self, job_id: str) -> Job | None:
        with self.db.read() as s:
            return s.get(Job, job_id)

    def _finish(
        self, job_id: str, state: JobState, reason: str, now: datetime, kind: str | None = None
    ) -> None:
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return
            job.state, job.reason, job.updated_at = state, reason, now
            s.add(job)
            level = "warning" if state is JobState.FAILED else "info"
            emit(s, now, kind or state.value.lower(), reason, job_id=job.id, level=level)
        self._planner().forget(job_id)

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
                self._planner().forget(job_id)
            elif msg != job.last_error:
                emit(s, now, "step_failed", msg, job_id=job_id, level="error")
            job.last_error = msg
            s.add(job)
