"""When a job's attempt has ended: the job's next state (lifecycle.next_state decides).

An ended attempt makes its job SUCCEEDED, FAILED, CANCELLED, HELD under its budget, or
waiting to be placed again (RECOVERING after an interruption, PENDING after a move), with
its counters and back-off. `Job.settled_attempt` names the last ended attempt acted on, so
doing it twice changes nothing. A wave of ends (a zone reclaimed, a fleet finishing) is
written WRITE_BATCH jobs per transaction before the per-job steps, then read back at once; a
job of a batch that failed is left to its own step, which writes its next state alone (and
backs it off alone if that fails too). The trainer's last progress (read with the pass's
batch, before any transaction) is recorded with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from scheduler.core.config import Config
from scheduler.core.jobspec import JobSpec
from scheduler.core.lifecycle import (
    JobFacts,
    LastAttempt,
    Limits,
    Transition,
    backoff_seconds,
    next_state,
)
from scheduler.core.states import JobState
from scheduler.daemon.checkpoints import ProgressReads
from scheduler.daemon.controllers.base import LIVE, WRITE_BATCH, Db, safe_message
from scheduler.daemon.controllers.job.handover import attempt_number
from scheduler.daemon.controllers.job.running import record_progress
from scheduler.daemon.controllers.job.snapshot import Snapshot
from scheduler.daemon.controllers.rows import load_by_id
from scheduler.daemon.controllers.spend import clear_hold, request_stop
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job

log = logging.getLogger("spotwise.reconcile")


class AttemptEnds:
    def __init__(
        self, db: Db, config: Callable[[], Config], forget: Callable[[str], None] | None = None
    ) -> None:
        self.db = db
        self._config = config
        # Drops a finished job's deadline policy from memory (DeadlinePlanner.forget); what
        # it learned stays in its PolicyState row for the next job of its shape.
        self._forget = forget or (lambda _: None)

    def write_next_states(self, snap: Snapshot, now: datetime) -> None:
        """The next state of every job whose last attempt ended, WRITE_BATCH jobs per
        transaction (a wave of interruptions or of finished jobs is a few commits, not one
        per job), then those jobs read back at once for the pass. A job of a batch that
        failed is left to its own step (`write_next_state_alone`)."""
        due = snap.ended()
        if not due:
            return
        for k in range(0, len(due), WRITE_BATCH):
            batch = due[k : k + WRITE_BATCH]
            final = {job.id: final_progress(job, snap.progress) for job, _ in batch}
            try:
                with self.db.write() as s:
                    jobs = load_by_id(s, Job, [job.id for job, _ in batch])
                    for job, last in batch:
                        row = jobs.get(job.id)
                        if row is not None:
                            self._write_next_state(s, row, last, now, final[job.id])
            except CrashForTest:
                raise
            except Exception as e:
                log.warning(
                    "writing the next state of %d jobs together failed (%s); one by one",
                    len(batch),
                    safe_message(e),
                )
                continue
            snap.next_state_written.update(job.id for job, _ in batch)
        with self.db.read() as s:
            fresh = load_by_id(s, Job, sorted(snap.next_state_written))
        written = snap.next_state_written
        snap.jobs = [fresh.get(j.id, j) if j.id in written else j for j in snap.jobs]
        snap.jobs = [j for j in snap.jobs if j.id not in written or j.id in fresh]

    def write_replaced_ends(self, snap: Snapshot, now: datetime) -> None:
        """Attempts that ended while the attempt placed beside them on their notice runs:
        settled once each (an interruption counted, a failure or a finish acted on), the job
        left on its new attempt unless that end decides the job (then the new one stops)."""
        due = [
            (job, snap.live[job.id], old)
            for job in snap.jobs
            if (old := snap.replaced.get(job.id)) is not None
            and old.end_reason is not None
            and attempt_number(job.settled_attempt) < old.number
        ]
        for job, new, old in due:
            try:
                with self.db.write() as s:
                    row = s.get(Job, job.id)
                    new_row = s.get(Attempt, new.id)
                    if row is not None and new_row is not None:
                        self._settle_replaced(s, row, old, new_row, now)
            except CrashForTest:
                raise
            except Exception as e:  # this job alone; its next pass tries again
                log.warning("job %s: settling %s failed: %s", job.id, old.id, safe_message(e))

    def _settle_replaced(
        self, s: Session, job: Job, old: Attempt, new: Attempt | None, now: datetime
    ) -> bool:
        """Act on `old`'s end while `new` (placed beside it) is the job's attempt. True when
        that end decided the job (finished, failed, a limit reached), False when the job
        goes on with `new`."""
        if attempt_number(job.settled_attempt) >= old.number or job.state.terminal:
            return job.state.terminal
        t = self._transition(job, old)
        job.settled_attempt = old.id
        job.recoveries += t.recoveries
        job.failures += t.failures
        job.updated_at = now
        if t.state in (JobState.PENDING, JobState.RECOVERING):
            emit(
                s,
                now,
                t.event,
                f"{t.reason}; its next attempt was placed on the notice",
                job_id=job.id,
                attempt_id=old.id,
                level=t.level,
            )
            s.add(job)
            return False
        job.state, job.reason = t.state, t.reason
        s.add(job)
        emit(s, now, t.event, t.reason, job_id=job.id, attempt_id=old.id, level=t.level)
        if new is not None and new.state in LIVE and new.stop_requested_at is None:
            request_stop(s, new, "budget" if t.state is JobState.HELD else "superseded", now)
        if job.state.terminal:
            self._forget(job.id)
        return True

    def _transition(self, job: Job, last: Attempt) -> Transition:
        cfg = self._config().daemon
        assert last.end_reason is not None
        return next_state(
            JobFacts(job.state, job.cancel_requested, job.recoveries, job.failures),
            LastAttempt(
                last.id, last.end_reason, last.pool, last.exit_code, last.detail,
                last.stop_reason,
            ),
            Limits(cfg.max_attempts, job_max_preemptions(job, cfg.max_preemptions)),
        )  # fmt: skip

    def write_next_state_alone(
        self, job: Job, last: Attempt, now: datetime, reads: ProgressReads
    ) -> None:
        """The next state of one job whose batch failed, in a transaction of its own."""
        final = final_progress(job, reads)
        with self.db.write() as s:
            row = s.get(Job, job.id)
            if row is not None:
                self._write_next_state(s, row, last, now, final)

    def _write_next_state(
        self,
        s: Session,
        job: Job,
        last: Attempt,
        now: datetime,
        progress: dict[str, Any] | None = None,
    ) -> None:
        """The job's next state now that `last` ended (lifecycle.next_state decides)."""
        if job.settled_attempt == last.id or job.state.terminal:
            return
        record_progress(job, progress)
        if last.replaces is not None:
            # Placed beside an attempt whose end was not acted on yet: that end first, once.
            old = s.get(Attempt, last.replaces)
            ended = old is not None and old.end_reason is not None
            if ended and self._settle_replaced(s, job, old, None, now):  # type: ignore[arg-type]
                return
        cfg = self._config().daemon
        t = self._transition(job, last)
        job.settled_attempt = last.id
        job.recoveries += t.recoveries
        job.failures += t.failures
        job.updated_at = now
        if t.state is JobState.HELD and job.state is JobState.HELD and job.reason:
            pass  # the budget stop already wrote the full reason and the window
        else:
            job.state, job.reason = t.state, t.reason
        if job.state is not JobState.HELD:
            clear_hold(job)  # held by a stop its instance had ended before: not held
        if t.failures:
            delay = backoff_seconds(
                job.failures, cfg.backoff_base.total_seconds(), cfg.backoff_max.total_seconds()
            )
            job.not_before = now + timedelta(seconds=delay)
        s.add(job)
        # One event per failure: a launch failure's reason is the attempt's own detail,
        # which the attempt's end event has already written in these very words.
        if not (last.detail and t.reason == last.detail):
            emit(s, now, t.event, t.reason, job_id=job.id, attempt_id=last.id, level=t.level)
        if job.state.terminal:
            self._forget(job.id)


def job_max_preemptions(job: Job, default: int | None) -> int | None:
    """The job file's `max_preemptions` where it sets one, else the daemon's."""
    try:
        own = JobSpec.model_validate_json(job.spec_json).max_preemptions
    except ValueError:  # written by another version: the daemon's limit
        return default
    return default if own is None else own


def final_progress(job: Job, reads: ProgressReads) -> dict[str, Any] | None:
    """progress.json once more as the attempt ends (read in the pass's batch): the running
    passes read it at most once a pass, so the trainer's last steps (its final save) would
    otherwise never reach `status`. Cosmetic, so an unreadable store only leaves the last
    step seen; a job already at its last step was not read again."""
    try:
        return reads.progress(job.id)
    except CrashForTest:
        raise
    except Exception as e:  # StoreError, or a store we cannot parse: its next state regardless
        log.debug("job %s: final progress unreadable: %s", job.id, safe_message(e))
        return None
