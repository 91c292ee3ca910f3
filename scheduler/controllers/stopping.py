"""Stops attempts on request (cancel, budget): terminate idempotently, retry on failure."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from scheduler.audit import emit
from scheduler.controllers.base import ControllerBase, safe_message
from scheduler.models import Attempt, AttemptEnd, AttemptState


class StopController(ControllerBase):
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
                safe_message(e),
                job_id=a.job_id,
                attempt_id=a.id,
                level="warning",
            )
