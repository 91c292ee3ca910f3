"""Jobs with a live attempt: progress, state, cancels, and whether the attempt should move.

Each pass records the trainer's step from progress.json (read for every running job at once
before the per-job steps, `Snapshot.progress`), keeps the job's state in line with its
attempt's, asks a cancelled job's attempt to checkpoint and stop, and asks whether a running
attempt should move: its deadline policy may want it elsewhere (back to spot once capacity
returns, or to on-demand as slack runs out), and price following moves an attempt whose
price no longer pays (scheduler.core.price_moves decides). Most running jobs change nothing
in a steady pass; that is judged on the pass's snapshot, so they cost no write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlmodel import Session

from providers.base import Market
from scheduler.core import price_moves
from scheduler.core.config import Config
from scheduler.core.deadline import DeadlinePlanner, placement_of
from scheduler.core.jobspec import JobSpec
from scheduler.core.placement import Requirements, expected_cost
from scheduler.core.states import AttemptState, JobState
from scheduler.daemon.checkpoints import ProgressReads, StoreError
from scheduler.daemon.controllers.base import LIVE, hours
from scheduler.daemon.controllers.job import signals
from scheduler.daemon.controllers.job.deadline_advice import advise, deadline_job
from scheduler.daemon.controllers.job.snapshot import PassFacts
from scheduler.daemon.controllers.job.writes import LiveUpdate
from scheduler.daemon.controllers.spend import request_stop
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job


class RunningJobs:
    def __init__(
        self,
        config: Callable[[], Config],
        planner: Callable[[], DeadlinePlanner],
        placing: Callable[[], bool],
    ) -> None:
        self._config = config
        self._planner = planner
        self._placing = placing  # False after SIGTERM: no attempt is moved

    def update(
        self,
        job: Job,
        a: Attempt,
        reads: ProgressReads,
        facts: PassFacts,
        now: datetime,
    ) -> LiveUpdate | None:
        """What the pass writes for a job with a live attempt, None when nothing changes."""
        progress = None
        problem = facts.spec_problem(job.spec_json)
        if a.state is AttemptState.RUNNING:
            try:
                progress = reads.progress(job.id)
            except StoreError:
                progress = None  # the observe step reports unreadable stores
        if problem is not None:
            # Its stored spec no longer validates: it runs on where it is (never stopped
            # for that), moved by nothing; said once, in its reason.
            step, total = progress_numbers(progress)
            if (
                job.reason == held_reason(problem)
                and not job.cancel_requested
                and not job.step_failures
                and (step is None or step == job.progress_step)
                and (total is None or total == job.total_steps)
            ):
                return None
            return LiveUpdate(job.id, a.id, progress, now)
        if self._unchanged(job, a, progress, facts, now):
            return None  # the common case in a steady pass: nothing to write
        return LiveUpdate(job.id, a.id, progress, now)

    def _unchanged(
        self,
        job: Job,
        a: Attempt,
        progress: dict[str, Any] | None,
        facts: PassFacts,
        now: datetime,
    ) -> bool:
        """True when `apply` would change nothing (judged on the pass's snapshot; the write
        itself re-reads the rows)."""
        step, total = progress_numbers(progress)
        if (step is not None and step != job.progress_step) or (
            total is not None and total != job.total_steps
        ):
            return False
        if job.step_failures:
            return False
        if signals.news(a, progress):
            return False
        if a.stop_requested_at is not None:
            return True
        if job.cancel_requested:
            return False
        if signals.may_be_over_duration(job, facts.spec(job.spec_json), now):
            return False
        if a.state is AttemptState.RUNNING and job.state is not JobState.RUNNING:
            return False
        if a.state is AttemptState.LAUNCHING and job.state is not JobState.LAUNCHING:
            return False
        if a.state is AttemptState.RUNNING and self._placing():
            if signals.undecided(a):
                return False
            spec = facts.spec(job.spec_json)
            if over_cap(spec, a, facts) is not None:
                return False
            if job.deadline is not None and spec.gpu_hours:
                return False  # the policy is asked, and what it learns saved, in the write
            if follows_prices(spec, a) and self._price_move(job, a, spec, facts, now):
                return False
        return True

    def apply(
        self,
        s: Session,
        job_w: Job | None,
        a_w: Attempt | None,
        u: LiveUpdate,
        facts: PassFacts,
    ) -> None:
        """Write `u` on the rows as re-read in the write's transaction."""
        now, progress = u.at, u.progress
        if job_w is None or a_w is None or a_w.state not in LIVE:
            return
        record_progress(job_w, progress)
        signals.record(s, job_w, a_w, progress, now)
        if job_w.step_failures:
            job_w.step_failures, job_w.last_error = 0, ""
        if job_w.cancel_requested and a_w.stop_requested_at is None:
            request_stop(s, a_w, "cancel", now)
            old = s.get(Attempt, a_w.replaces) if a_w.replaces else None
            if old is not None and old.state in LIVE and old.stop_requested_at is None:
                request_stop(s, old, "cancel", now)  # the noticed one it was placed beside
            emit(
                s,
                now,
                "stopping",
                "cancel requested: checkpointing and stopping",
                job_id=job_w.id,
                attempt_id=a_w.id,
            )
        elif a_w.stop_requested_at is None and (problem := facts.spec_problem(job_w.spec_json)):
            self._hold(s, job_w, a_w, problem, now)
        elif a_w.stop_requested_at is None and signals.stop_over_duration(
            s, job_w, a_w, facts.spec(job_w.spec_json), now
        ):
            pass  # checkpointing and stopping: it fails once it has ended
        elif a_w.stop_requested_at is None:
            if a_w.state is AttemptState.RUNNING and job_w.state is not JobState.RUNNING:
                job_w.state = JobState.RUNNING
                job_w.reason = f"on {a_w.pool} at ${a_w.price_per_hour:.2f}/h"
                job_w.updated_at = now
            elif a_w.state is AttemptState.LAUNCHING and job_w.state not in (JobState.LAUNCHING,):
                job_w.state = JobState.LAUNCHING
                job_w.updated_at = now
            if a_w.state is AttemptState.RUNNING and self._placing():
                spec = facts.spec(job_w.spec_json)
                over = over_cap(spec, a_w, facts)
                if over is not None:
                    self._leave_over_cap(s, job_w, a_w, over, now)
                elif signals.undecided(a_w):
                    signals.act(s, job_w, a_w, spec, facts, self._config(), now)
                if a_w.stop_requested_at is None and job_w.deadline is not None and spec.gpu_hours:
                    self._follow_deadline_policy(s, job_w, a_w, facts, now)
                if a_w.stop_requested_at is None and follows_prices(spec, a_w):
                    self._follow_prices(s, job_w, a_w, spec, facts, now)
        s.add(job_w)

    @staticmethod
    def _leave_over_cap(
        s: Session, job: Job, a: Attempt, over: tuple[float, float], now: datetime
    ) -> None:
        """The job's `max_price_per_hour` holds after the launch: a price above it is a move
        (checkpoint, stop, place again under the cap), whatever `migrate` says."""
        price, cap = over
        why = f"${price:.2f}/h is above the job's max_price_per_hour ${cap:.2f}"
        request_stop(s, a, "price", now)
        job.reason, job.updated_at = f"moving: {why}", now
        emit(
            s,
            now,
            "price_move",
            f"from {a.pool}: {why}",
            job_id=job.id,
            attempt_id=a.id,
            level="warning",
        )

    @staticmethod
    def _hold(s: Session, job: Job, a: Attempt, problem: str, now: datetime) -> None:
        """A job whose stored spec no longer validates keeps its instance: no move, no
        stop; its reason says why (the event once)."""
        if a.state is AttemptState.RUNNING and job.state is not JobState.RUNNING:
            job.state = JobState.RUNNING
        reason = held_reason(problem)
        if job.reason != reason:
            job.reason, job.updated_at = reason, now
            emit(s, now, "spec_invalid", reason, job_id=job.id, attempt_id=a.id, level="warning")

    def _follow_deadline_policy(
        self, s: Session, job: Job, a: Attempt, facts: PassFacts, now: datetime
    ) -> None:
        """Ask the deadline policy about the running attempt; move it if the policy would run
        elsewhere (back to spot once capacity returns, or to on-demand as slack runs out)."""
        spec = facts.spec(job.spec_json)
        if not spec.gpu_hours:
            return
        planner = self._planner()
        current = placement_of(a.market, a.zone)
        ran = hours(now - (a.started_at or a.created_at))
        # No budget headroom here: the running attempt's own burn would make its pool look
        # unaffordable to itself; budgets are judged when the next attempt is placed.
        ctx = facts.placement_context(
            job, spec, now, self._config().policy.restart_overhead, with_budget=False
        )
        advice = advise(
            s,
            planner,
            now,
            deadline_job(job, spec, now, a),
            Requirements.from_spec(spec),
            facts.catalog,
            ctx,
            current=current,
            remaining_overhead=max(0.0, planner.restart_overhead - ran),
            current_price=a.price_per_hour,
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

    def _price_move(
        self, job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, now: datetime
    ) -> tuple[price_moves.Move, price_moves.Alternative | None] | None:
        """Whether a running attempt's price no longer pays (scheduler.core.price_moves
        decides): pure, on what the pass read. A deadline job only leaves a spot price above
        on-demand here; where else it runs is its policy's call, on the next placement."""
        cat = facts.catalog
        rows = facts.pool_rows(a.pool)
        if len(rows) == 0:
            return None  # not in the catalog now: no price to judge it by
        ctx = facts.placement_context(
            job, spec, now, self._config().policy.restart_overhead, with_budget=False
        )
        per_hour = replace(ctx, remaining_gpu_hours=None)  # expected $ per hour of work
        cur_rate = float(expected_cost(cat, rows[:1], per_hour)[0])
        alt_ctx = replace(per_hour, avoid_pools=ctx.avoid_pools | {a.pool})
        req = facts.requirements(spec)
        best, ondemand = facts.alternatives(req, alt_ctx)
        od_price = ondemand.offering.price_per_hour if ondemand.offering is not None else None
        price = float(cat.price[rows[0]])
        ran = hours(now - (a.started_at or a.created_at))
        cur = price_moves.Running(a.pool, a.market == Market.SPOT.value, price, cur_rate, ran)
        alt = None
        if best.offering is not None and best.expected_cost is not None:
            alt = price_moves.Alternative(
                best.offering.pool, best.offering.price_per_hour, best.expected_cost
            )
        above_on_demand = cur.spot and od_price is not None and price > od_price
        if job.deadline is not None and spec.gpu_hours and not above_on_demand:
            return None  # a cheaper pool is the deadline policy's call, not a price move
        # Without an estimate, assume the job runs as long again as it has so far.
        remaining = max(1.0, ran)
        if ctx.remaining_gpu_hours:
            remaining = ctx.remaining_gpu_hours / max(a.gpu_count, 1)
        costs = price_moves.MoveCosts(
            restart_overhead_hours=ctx.restart_overhead_hours,
            checkpoint_hours=hours(self._config().daemon.stop_grace),
            lost_work_hours=ctx.lost_work_hours,
        )
        pol = self._config().policy
        move = price_moves.decide(
            cur, alt, od_price, remaining, costs, pol.follow_min_saving, hours(pol.follow_min_gap)
        )
        return None if move is None else (move, alt)

    def _follow_prices(
        self, s: Session, job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, now: datetime
    ) -> None:
        """Move a running attempt whose price no longer pays: decided on the fresh rows."""
        found = self._price_move(job, a, spec, facts, now)
        if found is None:
            return
        move, alt = found
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


def over_cap(spec: JobSpec, a: Attempt, facts: PassFacts) -> tuple[float, float] | None:
    """(price, cap) when the attempt's pool now costs more than the job's cap (its price in
    the catalog, else the price it was last billed at), else None."""
    cap = spec.max_price_per_hour
    if cap is None:
        return None
    rows = facts.pool_rows(a.pool)
    price = float(facts.catalog.price[rows[0]]) if len(rows) else a.billed_price
    if price is None or price <= cap + 1e-9:
        return None
    return price, cap


def held_reason(problem: str) -> str:
    """A running job's reason while its stored spec no longer validates."""
    return f"running on where it is, moved by nothing: {problem}"


def follows_prices(spec: JobSpec, a: Attempt) -> bool:
    """A gang moves only when the cloud or its policy moves it: a price move would restart
    every node for a per-node saving."""
    return spec.migrate != "never" and a.nodes == 1


def progress_numbers(progress: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """progress.json's step and total_steps, each None unless it is an integer."""
    if not progress:
        return None, None
    step, total = progress.get("step"), progress.get("total_steps")
    return (
        step if type(step) is int else None,
        total if type(total) is int else None,
    )


def record_progress(job: Job, progress: dict[str, Any] | None) -> None:
    """The trainer's step and total from progress.json, where they are numbers that moved."""
    step, total = progress_numbers(progress)
    if step is not None and step != job.progress_step:
        job.progress_step = step
    if total is not None and total != job.total_steps:
        job.total_steps = total
