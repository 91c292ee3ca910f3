"""Observing and ending instances (Observation): describe(), terminate(), and the verdict on
an instance nobody supervises.

Every call is decided from the files alone (see state.py): an instance is RUNNING only once
its job process started, PENDING while its launch or supervisor may still act, and an
instance nobody supervises is ended by whoever looks (its job killed, its end recorded, both
its locks held meanwhile). An ended instance leaves the hot set of live markers.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from providers.base import (
    EndReason,
    FailureKind,
    Instance,
    InstanceState,
    LaunchFailure,
    Market,
    ResourceRef,
    TransientError,
    not_found,
)
from providers.local import state
from providers.local.core import as_ref, parse_time, read_end, unlock
from providers.local.interruptions import TraceInterruptions


class Observation(TraceInterruptions):
    """describe() and terminate(), and what they decide for an unsupervised instance."""

    def describe(self, refs: Sequence[ResourceRef | str]) -> list[Instance]:
        """One Instance per ref; NOT_FOUND for ids this market never had (or pruned)."""
        return [self._view_safely(as_ref(r)) for r in refs]

    def terminate(self, refs: Sequence[ResourceRef | str]) -> None:
        """Ask each supervisor to stop its job (SIGTERM, SIGKILL after kill_after). An
        unsupervised instance is decided here: its job's processes are killed. Instances
        that could not be asked are retried by raising TransientError after all others."""
        failed = []
        for r in refs:
            ref = as_ref(r)
            d = self._locate(ref.id)
            try:
                if d is None or (d / state.END).exists():
                    continue
                state.create_once(d / state.TERMINATE, {"at": self._clock.now().isoformat()})
                self._view(ref.id, ref)  # ends an orphan or a dead launch now
            except Exception as e:  # one bad instance never fails the others
                failed.append(f"{ref.id}: {e}")
        if failed:
            raise TransientError(f"could not terminate {', '.join(failed)}")

    def _view_safely(self, ref: ResourceRef) -> Instance:
        """describe() of one instance that never raises: a damaged directory is reported (an
        event) and shown RUNNING while its supervisor or job lives, else ENDED/UNKNOWN."""
        try:
            return self._view(ref.id, ref)
        except Exception as e:
            self._warn(ref.id, f"unreadable instance state: {e!r}")
        d = self.instances_dir / ref.id
        alive = False
        with contextlib.suppress(Exception):
            alive = state.supervisor_alive(d) or state.kill_job(d, None)[1] > 0
        inst = not_found(ref, self.name)
        inst.state = InstanceState.RUNNING if alive else InstanceState.ENDED
        inst.end_reason = None if alive else EndReason.UNKNOWN
        return inst

    def _view(self, instance_id: str, ref: ResourceRef | None = None) -> Instance:
        ref = ref or ResourceRef(instance_id)
        d = self._locate(instance_id)
        if d is None:
            return not_found(ref, self.name)
        spec = self._spec(instance_id)
        if spec is None:
            self._warn(instance_id, "spec.json is missing or corrupt")
            spec = {}
        else:
            try:
                self._enforce_trace(spec)
            except (KeyError, TypeError, ValueError) as e:
                self._warn(instance_id, f"cannot follow the trace: {e!r}")
        job = state.read_json(d / state.JOB)
        end = read_end(d)
        alive = end is None and state.supervisor_alive(d)
        if end is None and not alive:
            end = self._end_unsupervised(instance_id, d)
            job = state.read_json(d / state.JOB)
        notice = state.read_json(d / state.NOTICE)
        inst = Instance(
            id=instance_id,
            cloud=spec.get("cloud", ""),
            region=spec.get("region", ref.region),
            zone=spec.get("zone", ref.zone),
            instance_type=spec.get("instance_type", ""),
            market=Market(spec.get("market", Market.ON_DEMAND.value)),
            state=InstanceState.PENDING,
            tags=dict(spec.get("tags", {})),
            # Billing starts when the job process started, not when the spec was written.
            launched_at=self._clock_from_real(parse_time((job or {}).get("started_at"))),
            notice_at=self._clock_from_real(parse_time((notice or {}).get("noticed_at"))),
            node=int(spec.get("node", 0)),
        )
        if end is not None:
            inst.state = InstanceState.ENDED
            inst.end_reason = _reason(end.get("reason"))
            inst.exit_code = end.get("exit_code")
            inst.ended_at = self._clock_from_real(parse_time(end.get("ended_at")))
            failure = end.get("failure")
            if inst.end_reason is EndReason.LAUNCH_FAILED and isinstance(failure, dict):
                inst.failure = LaunchFailure(
                    FailureKind(failure.get("kind", FailureKind.FATAL.value)),
                    str(failure.get("message", "")),
                    inst.pool if inst.instance_type else None,
                )
            self._retire(instance_id, d, end)
        elif job is not None or (d / state.JOB).exists():
            # Only once the job process really started; without a supervisor only while its
            # processes survive being killed (otherwise _end_unsupervised has recorded an end).
            inst.state = InstanceState.RUNNING
        return inst

    def _end_unsupervised(self, instance_id: str, d: Path) -> dict[str, Any] | None:
        """Record the end of an instance nobody supervises, holding both its locks (so no
        launch or supervisor can start meanwhile); None while a launch or supervisor holds
        them (still PENDING/RUNNING). A job whose supervisor died is killed, whole group."""
        try:
            launch_lock = state.try_lock(d / state.LAUNCH_LOCK)
        except OSError:
            return read_end(d)  # gone or read-only: report what is recorded
        if launch_lock is None:
            return None  # a launch is in progress: it may still complete
        try:
            sup_lock = state.try_lock(d / state.LOCK)
            if sup_lock is None:
                return None  # a supervisor owns it (it just started)
            try:
                end = read_end(d)
                if end is not None:
                    return end
                job = state.read_json(d / state.JOB) or {}
                pgid = job.get("pid") if isinstance(job.get("pid"), int) else None
                ran = (d / state.JOB).exists() or (d / state.SUPERVISOR).exists()
                killed, left = state.kill_job(d, pgid) if ran else (0, 0)
                if left:  # unkillable (D state): it still runs, so it has not ended
                    self._warn(instance_id, f"{left} processes of an unsupervised job survive")
                    return None
                now = datetime.now(UTC).isoformat()
                if (d / state.JOB).exists() or killed:
                    end = {
                        "reason": EndReason.UNKNOWN.value,
                        "exit_code": None,
                        "ended_at": now,
                        "note": "the supervisor died; its job was killed",
                    }
                    if killed:
                        self._warn(instance_id, "supervisor died: killed its job's processes")
                elif (d / state.TERMINATE).exists():
                    end = {"reason": EndReason.TERMINATED.value, "exit_code": None, "ended_at": now}
                else:
                    why = (
                        "the supervisor died before starting the job"
                        if ran
                        else "the launch was interrupted before the job started"
                    )
                    failure = {"kind": FailureKind.FATAL.value, "message": why}
                    end = {
                        "reason": EndReason.LAUNCH_FAILED.value,
                        "exit_code": None,
                        "ended_at": now,
                        "failure": failure,
                    }
                try:
                    state.write_json(d / state.END, end)
                except OSError as e:  # a full disk: the verdict holds for this call
                    self._warn(instance_id, f"cannot record the end: {e}")
                return end
            finally:
                unlock(sup_lock)
        finally:
            unlock(launch_lock)

    def _retire(self, instance_id: str, d: Path, end: dict[str, Any]) -> None:
        """An ended instance leaves the hot set and enters the ended index (for prune)."""
        marker = self.live_dir / instance_id
        if not marker.exists():
            return
        try:
            ended = parse_time(end.get("ended_at"))
            ts = ended.timestamp() if ended else time.time()
            state.append_line(self.state_dir / state.ENDED_INDEX, f"{ts:.3f} {instance_id}")
            marker.unlink(missing_ok=True)
        except (OSError, ValueError) as e:
            self._warn(instance_id, f"cannot retire: {e}")


def _reason(value: Any) -> EndReason:
    try:
        return EndReason(value)
    except ValueError:
        return EndReason.UNKNOWN
