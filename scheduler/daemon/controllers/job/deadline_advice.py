"""A deadline job's policy advice, with what the policy learned kept across daemon restarts.

The deadline policy (scheduler.core.deadline) is asked both where a waiting job goes and
whether a running one should move. What it learns about a job is saved in the job's
PolicyState row after each question and restored before the next one the daemon asks after
a restart or a reload; a new job starts from the newest state of another job of the same
shape (GPUs, clouds, regions) rather than from nothing.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from scheduler.core.catalog import Catalog
from scheduler.core.deadline import DeadlineAdvice, DeadlineJob, DeadlinePlanner
from scheduler.core.jobspec import JobSpec
from scheduler.core.placement import PlacementContext, Requirements
from scheduler.core.policy import Action
from scheduler.daemon.controllers.base import hours
from scheduler.daemon.controllers.spend import unaccrued_usd
from scheduler.state.models import Attempt, Job, PolicyState

# A deadline job with checkpoint_interval = "auto" that has not launched yet: the hedge counts
# the default fixed interval as at risk until placement picks the pool's own.
AUTO_BEFORE_LAUNCH = timedelta(minutes=10)
log = logging.getLogger("spotwise.reconcile")


def advise(
    s: Session,
    planner: DeadlinePlanner,
    now: datetime,
    job: DeadlineJob,
    req: Requirements,
    cat: Catalog,
    ctx: PlacementContext,
    current: Action | None = None,
    remaining_overhead: float = 0.0,
    current_price: float | None = None,
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
                if warm:
                    planner.warm(job.job_id, state)
                else:
                    planner.restore(job.job_id, state, hours(now - row.updated_at))
            except (ValueError, TypeError, KeyError):
                log.warning("job %s: unreadable policy state; starting cold", job.job_id)
    advice = planner.advise(job, req, cat, ctx, current, remaining_overhead, current_price)
    learned = planner.state(job.job_id)
    if learned is not None:
        mine = s.get(PolicyState, job.job_id) or PolicyState(
            job_id=job.job_id, policy=planner.policy_name, updated_at=now
        )
        mine.policy, mine.shape = planner.policy_name, shape
        mine.state_json, mine.updated_at = json.dumps(learned), now
        s.add(mine)
    return advice


def deadline_job(
    job: Job, spec: JobSpec, now: datetime, live: Attempt | None = None
) -> DeadlineJob:
    """The job as its deadline policy sees it. `spent` is what the daemon recorded it paying
    (the price actually paid, plus the live attempt's time since the last accrual), per
    instance as the policy's prices are: its regret hedge must count every dollar, including
    hours its own ledger never saw (the daemon down, a slow pass, a policy that started cold
    after a SIGHUP or an unreadable state row)."""
    # Work is in hours on one instance of the shape the job runs on: the running attempt's
    # GPU count and nodes (the alternative it was placed on; an elastic gang may have fewer
    # nodes), else the smallest alternative (the longest wall time, so the deadline holds
    # whichever it gets).
    if live is not None and live.gpu_count:
        per_instance = live.gpu_count * live.nodes
    else:
        per_instance = min(g.count for g in spec.gpu_specs()) * spec.nodes
    progress = 0.0
    if job.total_steps and job.progress_step:
        progress = min(1.0, job.progress_step / job.total_steps)
    assert job.deadline is not None and spec.gpu_hours is not None
    paid = job.cost_usd + (unaccrued_usd(live, now) if live is not None else 0.0)
    if isinstance(spec.checkpoint_interval, timedelta):
        interval = hours(spec.checkpoint_interval)
    elif live is not None and live.checkpoint_interval_s:  # "auto": what the attempt follows
        interval = live.checkpoint_interval_s / 3600.0
    else:  # "auto" before a launch chose one: the default a job file gets
        interval = hours(AUTO_BEFORE_LAUNCH)
    # Work since the last checkpoint: at most one interval, and no more than the running
    # attempt has run (the daemon does not see the trainer's own saves).
    ran = hours(now - live.started_at) if live is not None and live.started_at else 0.0
    return DeadlineJob(
        job.id,
        job.created_at,
        job.deadline,
        spec.gpu_hours / per_instance,
        progress,
        spent=paid / (live.nodes if live is not None else spec.nodes),
        checkpoint_interval=interval,
        work_at_risk=min(interval, max(0.0, ran)),
    )
