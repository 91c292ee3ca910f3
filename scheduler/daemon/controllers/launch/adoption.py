"""Launches asked for but never recorded (a crash, a call past its deadline): found by token.

The attempt's instances are looked up by its deterministic token: found, they are adopted
(recorded as the launch's answer); part of a gang is completed with the same token while
the launch timeout lasts and stopped after it; none found, the launch is made again with
the same token (which the cloud treats as the same request) once the provider's visibility
delay has passed, so nothing is ever launched twice, or failed after the launch timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from providers.base import InstanceState
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.lifecycle import gang_shortfall
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.controllers.base import Clouds, Db, finding
from scheduler.daemon.controllers.gang import record_nodes
from scheduler.daemon.controllers.launch.records import LaunchRecords
from scheduler.daemon.controllers.spend import request_stop
from scheduler.state.audit import emit
from scheduler.state.models import Attempt


class Adoption:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        config: Callable[[], Config],
        records: LaunchRecords,
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self._config = config
        self.records = records

    def adopt(self, attempt_ids: Sequence[str]) -> list[str]:
        """Attempts whose launch was asked for but never recorded (a crash, a timeout): find
        their instances by token. Returns the ids still without an instance (to relaunch)."""
        clouds = self._clouds()
        with self.db.read() as s:
            rows = [s.get(Attempt, i) for i in attempt_ids]
        calls = {
            a.id: (a.provider, finding(a.token, a.region))
            for a in rows
            if a is not None and clouds.get(a.provider) is not None
        }
        results = clouds.gather(calls)
        now = self.clock.now()
        left: list[str] = []
        for a in rows:
            if a is None:
                continue
            r = results.get(a.id)
            if r is None or r.error is not None:
                continue  # cannot tell: neither adopt nor relaunch this pass
            found = [i for i in (r.value or []) if i.state is not InstanceState.NOT_FOUND]
            if found and len(found) < a.nodes:
                # Part of a gang (the daemon died between its nodes): the same token
                # completes it while the launch timeout lasts; past it, stop what exists.
                if now - a.created_at <= self._config().daemon.launch_timeout:
                    left.append(a.id)
                    continue
                with self.db.write() as s:
                    fresh = s.get(Attempt, a.id)
                    if fresh is not None and fresh.state is not AttemptState.ENDED:
                        record_nodes(s, fresh, found, now)
                        request_stop(s, fresh, "launch_timeout", now)
                        fresh.detail = gang_shortfall(
                            len(found), a.nodes, a.instance_type, a.zone, "came up in time"
                        )
                        s.add(fresh)
                continue
            if found:
                with self.db.write() as s:
                    emit(
                        s,
                        now,
                        "adopted",
                        f"found {found[0].id} by token {a.token}",
                        job_id=a.job_id,
                        attempt_id=a.id,
                    )
                self.records.record(a.id, found, None)
                continue
            delay = clouds.providers[a.provider].capabilities.visibility_delay
            since = a.launch_requested_at or a.created_at
            if now - since < delay:
                continue  # the launch may not be visible yet; never launch twice
            if now - a.created_at > self._config().daemon.launch_timeout:
                self.records.fail(
                    a.id, AttemptEnd.LAUNCH_FAILED, "the launch did not complete in time", now
                )
                continue
            left.append(a.id)
        return left
