"""Leak collection: our tagged instances with no live attempt are terminated after a grace."""

from __future__ import annotations

from sqlmodel import select

from providers.base import TAG_ATTEMPT, TAG_JOB, InstanceState
from scheduler.audit import emit
from scheduler.controllers.base import LIVE, ControllerBase, safe_message
from scheduler.models import Attempt


class LeakController(ControllerBase):
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
                    emit(s, now, "list_failed", f"{name}: {safe_message(e)}", level="warning")
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
                        emit(
                            s,
                            now,
                            "terminate_failed",
                            f"{inst.id}: {safe_message(e)}",
                            level="warning",
                        )
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
