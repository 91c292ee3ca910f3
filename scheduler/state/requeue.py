"""Operator actions on stuck jobs: release a HELD job, requeue a FAILED one.

Both only write desired state (PENDING or RECOVERING, with a reason and an event); the
daemon's JobController places such jobs on its next pass, so the CLI never talks to a cloud.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from scheduler.core.errors import UserError
from scheduler.core.states import AttemptState, JobState
from scheduler.state.audit import emit
from scheduler.state.desired import resolve
from scheduler.state.models import Attempt, Job


def _runnable_state(job: Job) -> JobState:
    # A job that was preempted before resumes from its checkpoint: RECOVERING says so.
    return JobState.RECOVERING if job.recoveries else JobState.PENDING


def release(engine: Engine, ref: str, now: datetime, actor: str | None = None) -> Job:
    """A HELD job back to the queue. A hard budget that still binds holds it again on the
    daemon's next pass (with that reason), so release never overruns a budget."""
    with Session(engine) as s:
        job = resolve(s, ref)
        if job.state is not JobState.HELD:
            raise UserError(
                f"job {job.id} is {job.state.value}, not HELD"
                + (": use 'spotwise requeue'" if job.state is JobState.FAILED else "")
            )
        job.state, job.reason, job.updated_at = _runnable_state(job), "released by user", now
        job.held_budget = job.held_window_start = job.held_limit_usd = None
        job.held_spent_usd = None
        s.add(job)
        emit(s, now, "released", "released by user", job_id=job.id, actor=actor)
        s.commit()
        s.refresh(job)
        return job


def requeue(engine: Engine, ref: str, now: datetime, actor: str | None = None) -> Job:
    """A FAILED job back to PENDING with fresh failure counters (max_attempts, backoff and
    quarantine count again from zero). Refused while an attempt still stops (UserError);
    its latest attempt counts as settled: it is accounted for, and must not fail the job a
    second time."""
    with Session(engine) as s:
        job = resolve(s, ref)
        if job.state is not JobState.FAILED:
            raise UserError(
                f"job {job.id} is {job.state.value}, not FAILED"
                + (": use 'spotwise release'" if job.state is JobState.HELD else "")
            )
        live = s.exec(
            select(Attempt).where(
                Attempt.job_id == job.id,
                col(Attempt.state).in_(
                    (AttemptState.LAUNCHING, AttemptState.RUNNING, AttemptState.STOPPING)
                ),
            )
        ).first()
        if live is not None:
            # Its stop would end the attempt as it was asked (a quarantine: failed) and fail
            # the job again a minute later: the stop settles first.
            what = live.instance_id or "its launch"
            raise UserError(
                f"job {job.id} is FAILED but its attempt {live.number} ({what}) is still "
                f"stopping: requeue it once it has ended (spotwise show {job.id})"
            )
        # Every attempt has ended: the latest is accounted for (a quarantine's stop ends its
        # attempt after the job failed, and settling it now would fail the job again).
        last = s.exec(
            select(Attempt.id).where(Attempt.job_id == job.id).order_by(col(Attempt.number).desc())
        ).first()
        if last is not None:
            job.settled_attempt = last
        job.state, job.reason, job.updated_at = JobState.PENDING, "requeued by user", now
        job.not_before = None
        job.step_failures, job.last_error, job.failures = 0, "", 0
        job.cancel_requested = False
        s.add(job)
        emit(s, now, "requeued", "requeued by user", job_id=job.id, actor=actor)
        s.commit()
        s.refresh(job)
        return job
