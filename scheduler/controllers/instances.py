"""Brings live attempts in line with what the clouds report: ends, notices, pool history."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, select

from providers.base import EndReason, Instance, InstanceState, Market, ProviderError
from scheduler.audit import emit
from scheduler.controllers.base import EXIT_PREEMPTED, LIVE, ControllerBase, hours, safe_message
from scheduler.models import Attempt, AttemptEnd, AttemptState, Job, PoolState
from scheduler.progress import is_done

# Why we stopped an attempt -> how it ended (a trainer that checkpointed on our SIGTERM may
# exit "preempted"; the reason we asked wins).
STOP_ENDS = {"budget": AttemptEnd.BUDGET, "policy": AttemptEnd.MIGRATED}


class InstanceController(ControllerBase):
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
                    emit(s, now, "describe_failed", f"{name}: {safe_message(e)}", level="warning")
                    continue
                except Exception as e:
                    emit(s, now, "describe_failed", f"{name}: {safe_message(e)}", level="error")
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
            return STOP_ENDS.get(a.stop_reason or "", AttemptEnd.CANCELLED)
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
