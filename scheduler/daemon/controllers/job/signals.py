"""Interruption signals a running job's trainer wrote to its store, the early move, and the
job's wall-clock cap (`max_duration`).

The trainer names a notice in progress.json the moment it sees one (every cloud's, not only
the AWS warning the daemon reads from its queue) and an early signal (an AWS rebalance
recommendation read from the instance's metadata); the daemon records both on the attempt at
its next pass. On an early signal it decides once, with
`scheduler.core.early_signals.decide`, whether moving now pays against waiting for the
notice; the decision, either way, is written to the attempt and said in an event.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlmodel import Session, func, select

from providers.base import Market
from scheduler.core import early_signals, price_moves
from scheduler.core.config import Config
from scheduler.core.jobspec import JobSpec
from scheduler.core.placement import expected_cost
from scheduler.daemon.controllers.base import hours
from scheduler.daemon.controllers.job.snapshot import PassFacts
from scheduler.daemon.controllers.spend import request_stop
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job

# The stop reason of an early move (an attempt so stopped ended "migrated").
EARLY_STOP = "rebalance"


def _record(
    progress: dict[str, Any] | None, key: str, a: Attempt | None = None
) -> dict[str, Any] | None:
    """The record `key` progress.json names, when it was written by attempt `a` (or names no
    attempt): an attempt placed beside a noticed one must not take that one's notice."""
    doc = (progress or {}).get(key)
    if not isinstance(doc, dict):
        return None
    writer = (progress or {}).get("attempt")
    if a is not None and writer not in (None, "") and str(writer) != str(a.number):
        return None
    return doc


def notice_in(a: Attempt, progress: dict[str, Any] | None) -> bool:
    """Whether the attempt has a notice: recorded, or named by its trainer in progress.json."""
    return a.notice_at is not None or _record(progress, "notice", a) is not None


def news(a: Attempt, progress: dict[str, Any] | None) -> bool:
    """True when progress.json names a notice or an early signal the attempt lacks."""
    return (a.notice_at is None and _record(progress, "notice", a) is not None) or (
        a.early_signal_at is None and _record(progress, "early_signal", a) is not None
    )


def undecided(a: Attempt) -> bool:
    """An early signal with no decision yet, and no notice since (then it is too late)."""
    return a.early_signal_at is not None and not a.early_action and a.notice_at is None


def record(
    s: Session, job: Job, a: Attempt, progress: dict[str, Any] | None, now: datetime
) -> None:
    """The notice and early signal progress.json names, at this pass's time (the trainer's
    clock is not the daemon's: a sped-up market runs ahead of the wall)."""
    notice = _record(progress, "notice", a)
    if notice is not None and a.notice_at is None:
        a.notice_at = now
        emit(
            s,
            now,
            "interruption_notice",
            f"{a.pool}: the trainer saw a notice from {notice.get('source', '?')}; "
            "the job is checkpointing",
            job_id=job.id,
            attempt_id=a.id,
            level="warning",
        )
    early = _record(progress, "early_signal", a)
    if early is not None and a.early_signal_at is None:
        a.early_signal_at = now
        emit(
            s,
            now,
            "early_signal",
            f"{a.pool}: the trainer saw an early signal ({early.get('source', '?')}) "
            "and saved early",
            job_id=job.id,
            attempt_id=a.id,
        )


def decide_move(
    job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, cfg: Config, now: datetime
) -> tuple[price_moves.Move | None, str]:
    """Whether to move now on the attempt's early signal: (the move, or None; why)."""
    cat = facts.catalog
    rows = facts.pool_rows(a.pool)
    if a.market != Market.SPOT.value or len(rows) == 0 or spec.migrate == "never":
        return None, "it stays: not a spot pool the daemon can price, or the job never moves"
    pol = cfg.policy
    ctx = facts.placement_context(job, spec, now, pol.restart_overhead, with_budget=False)
    per_hour = replace(ctx, remaining_gpu_hours=None)
    cur_rate = float(expected_cost(cat, rows[:1], per_hour)[0])
    alt_ctx = replace(per_hour, avoid_pools=ctx.avoid_pools | {a.pool})
    best, _ = facts.alternatives(facts.requirements(spec), alt_ctx)
    alt = None
    if best.offering is not None and best.expected_cost is not None:
        alt = price_moves.Alternative(
            best.offering.pool, best.offering.price_per_hour, best.expected_cost
        )
    ran = hours(now - (a.started_at or a.created_at))
    remaining = max(1.0, ran)
    if ctx.remaining_gpu_hours:
        remaining = ctx.remaining_gpu_hours / max(a.gpu_count, 1)
    price = float(cat.price[rows[0]])
    cur = price_moves.Running(a.pool, True, price, cur_rate, ran)
    costs = price_moves.MoveCosts(
        restart_overhead_hours=ctx.restart_overhead_hours,
        checkpoint_hours=hours(cfg.daemon.stop_grace),
        lost_work_hours=0.0,
    )
    signal = early_signals.Signal(pol.early_signal_probability, hours(pol.early_signal_lead))
    move = early_signals.decide(cur, alt, remaining, costs, signal)
    if move is not None:
        return move, move.reason
    if alt is None:
        return None, "it stays: no other pool fits"
    stay, go = early_signals.costs(cur, alt, remaining, costs, signal)
    return None, (
        f"it stays: waiting costs ${stay:.2f} to finish in expectation, "
        f"moving to {alt.pool} ${go:.2f}"
    )


def act(
    s: Session, job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, cfg: Config, now: datetime
) -> None:
    """Decide once on an undecided early signal; move (stop, re-placed elsewhere) or wait."""
    move, why = decide_move(job, a, spec, facts, cfg, now)
    a.early_action = "moved" if move is not None else "waited"
    s.add(a)
    if move is not None:
        request_stop(s, a, EARLY_STOP, now)
        job.reason = f"moving early: {why}"
        job.updated_at = now
    emit(
        s,
        now,
        "early_move" if move is not None else "early_wait",
        f"{a.pool}: rebalance recommended; {why}",
        job_id=job.id,
        attempt_id=a.id,
    )


def may_be_over_duration(job: Job, spec: JobSpec, now: datetime) -> bool:
    """Whether the job may have run past `max_duration`: judged on the snapshot without a
    query (a job first starts after it is submitted), so a job within it costs no write."""
    return spec.max_duration is not None and now - job.created_at >= spec.max_duration


def over_duration(s: Session, job: Job, spec: JobSpec, now: datetime) -> str:
    """Why the job is past `max_duration` since its first start, or "" while it is not (or
    never started)."""
    cap = spec.max_duration
    if cap is None or not may_be_over_duration(job, spec, now):
        return ""
    first = s.exec(select(func.min(Attempt.started_at)).where(Attempt.job_id == job.id)).one()
    if first is None or now - first < cap:
        return ""
    return f"ran past max_duration ({cap}) since its first start"


def stop_over_duration(s: Session, job: Job, a: Attempt, spec: JobSpec, now: datetime) -> bool:
    """Ask the attempt to checkpoint and stop once the job has run `max_duration` since its
    first start (its waits and recoveries count); the job FAILs when it has ended."""
    why = over_duration(s, job, spec, now)
    if not why:
        return False
    request_stop(s, a, "max_duration", now)
    a.detail = why
    job.reason = f"stopping: {why}"
    job.updated_at = now
    s.add(a)
    emit(s, now, "max_duration", why, job_id=job.id, attempt_id=a.id, level="warning")
    return True
