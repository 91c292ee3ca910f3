"""Stops attempts on request (cancel, budget, policy): terminate by reference, re-ask every
stop_grace, and for a launch in flight terminate whatever the cloud started under its token.
A gang's stop terminates every node it still has (one call per provider).

Budget stops also go out on their own thread (`BudgetStops`), woken by the enforcement that
asks for them: a pass waits up to `call_timeout` on each slow cloud, and the terminate that
keeps a hard budget must not wait behind it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlmodel import col, select

from providers.base import Instance, InstanceState, Provider, ResourceRef
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.lifecycle import STOP_ENDS
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.controllers.base import (
    LIVE,
    Clouds,
    Db,
    SaidOnce,
    safe_message,
    terminating,
)
from scheduler.daemon.controllers.gang import node_refs, nodes_of, record_nodes
from scheduler.state.audit import emit
from scheduler.state.models import Attempt

log = logging.getLogger("spotwise.reconcile")


class StopController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        config: Callable[[], Config],
        launch_in_flight: Callable[[str], bool] | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self._config = config
        # Whether an attempt's own launch call is still on the wire (LaunchController): such
        # an attempt is not ended, its instance is recorded when the call lands, then stopped.
        self._in_flight = launch_in_flight or (lambda _: False)
        self.said = SaidOnce()  # terminate_failed, once per reason and attempt

    def step(self, reasons: frozenset[str] | None = None) -> None:
        """Send the terminates due: every stop asked for, or only those for `reasons`."""
        now = self.clock.now()
        grace = self._config().daemon.stop_grace
        clouds = self._clouds()
        with self.db.read() as s:
            q = select(Attempt).where(
                col(Attempt.state).in_(LIVE),
                col(Attempt.stop_requested_at).is_not(None),
            )
            if reasons is not None:
                q = q.where(col(Attempt.stop_reason).in_(sorted(reasons)))
            stopping = s.exec(q).all()
            gangs = [a.id for a in stopping if a.nodes > 1]
            nodes = nodes_of(s, gangs) if gangs else {}
        terminate: dict[str, tuple[str, Callable]] = {}
        for a in stopping:
            if a.instance_id is not None:
                if a.terminate_sent_at is None or now - a.terminate_sent_at >= grace:
                    refs = node_refs(nodes.get(a.id, []))
                    if a.nodes <= 1 and a.instance_id is not None:
                        refs = [
                            ResourceRef(
                                a.instance_id, a.region, a.zone, a.instance_scope, a.started_at
                            )
                        ]
                    if refs:
                        terminate[a.id] = (a.provider, terminating(refs))
                continue
            if a.launch_requested_at is None and not nodes.get(a.id):
                self._end_unlaunched(a.id, now)  # the cloud was never asked: nothing to stop
                continue
            # The cloud was asked and we never heard back (or, for a gang, heard of some nodes
            # but not node 0): stop and adopt everything started under the token, so each node
            # is observed to its end and billed until then.
            terminate[a.id] = (a.provider, lambda p, a=a: _terminate_token(p, a.token, a.region))
        if not terminate:
            return
        results = clouds.gather(terminate)

        def delay_of(name: str):  # type: ignore[no-untyped-def]
            return clouds.providers[name].capabilities.visibility_delay

        with self.db.write() as s:
            for attempt_id, r in results.items():
                got = s.get(Attempt, attempt_id)
                if got is None or got.state is AttemptState.ENDED:
                    continue
                a = got
                if r.error is not None:
                    msg = safe_message(r.error)
                    if self.said.first(a.id, msg):
                        emit(
                            s,
                            now,
                            "terminate_failed",
                            msg,
                            job_id=a.job_id,
                            attempt_id=a.id,
                            level="warning",
                        )
                    continue
                self.said.forget(a.id)
                first = a.terminate_sent_at is None
                a.terminate_sent_at = now
                s.add(a)
                if a.instance_id is None:
                    found = r.value or []
                    if found:
                        # Adopt what the cloud started under the token: it is billed from its
                        # launch and observed until it has ended (every node of a gang).
                        inst = found[0]
                        record_nodes(s, a, found if a.nodes > 1 else [inst], now)
                        a.instance_id, a.instance_scope = inst.id, inst.scope
                        a.state = AttemptState.STOPPING
                        if inst.launched_at is not None and a.started_at is None:
                            a.started_at = a.accrued_until = min(inst.launched_at, now)
                    elif now - a.launch_requested_at > delay_of(  # type: ignore[operator]
                        a.provider
                    ) and not self._in_flight(a.id):
                        a.state, a.ended_at = AttemptState.ENDED, now
                        a.end_reason = STOP_ENDS.get(a.stop_reason or "", AttemptEnd.CANCELLED)
                        a.detail = "stopped before its launch was recorded"
                if first:
                    emit(
                        s,
                        now,
                        "stopping",
                        f"{a.instance_id or a.token}: {a.stop_reason}",
                        job_id=a.job_id,
                        attempt_id=a.id,
                    )

    def _end_unlaunched(self, attempt_id: str, now: datetime) -> None:
        with self.db.write() as s:
            a = s.get(Attempt, attempt_id)
            if a is None or a.state is AttemptState.ENDED or a.launch_requested_at is not None:
                return
            a.state, a.ended_at = AttemptState.ENDED, now
            a.end_reason = STOP_ENDS.get(a.stop_reason or "", AttemptEnd.CANCELLED)
            s.add(a)


BUDGET_STOPS = frozenset({"budget"})


class BudgetStops:
    """The stops that keep hard budgets, sent on their own thread as soon as enforcement
    asks for them (SpendController wakes it when its transaction commits), whatever the
    reconcile pass is waiting on. Slow clouds stall only their own calls (each provider has
    its own workers and every call its deadline), so a healthy cloud's terminate goes out
    at once. The passes keep sending every stop, these included, as before."""

    def __init__(self, stops: StopController) -> None:
        self.stops = stops
        self._wake = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def run(self, stop: threading.Event, every: float = 30.0) -> None:
        """Until `stop` (set it, then `wake`): send due budget stops when woken, and at
        least every `every` real seconds."""
        while not stop.is_set():
            self._wake.wait(every)
            self._wake.clear()
            if stop.is_set():
                return
            try:
                self.stops.step(BUDGET_STOPS)
            except Exception:
                log.exception("budget stops failed; the next pass sends them")


def _terminate_token(provider: Provider, token: str, region: str) -> list[Instance]:
    """Terminate every instance launched under `token`; returns what was found."""
    found = [
        i for i in provider.find_by_token(token, region) if i.state is not InstanceState.NOT_FOUND
    ]
    live = [i.ref for i in found if i.live]
    if live:
        provider.terminate(live)
    return found
