"""What the cloud answered a launch, written down: the instance, or why there is none.

A launch that returned its instance records the instance id (and the node rows), and the
job runs once the cloud says it does; the common case, a single instance, is written for
the whole pass in a few core statements (`record_launched`). A gang runs once all its
nodes run; one that did not come up whole is stopped and its pool marked for gangs of its
size. A capacity error marks the pool unavailable for a while and ends the attempt, so the
job takes its next offering in the same pass; a rejected request fails the attempt; a
throttled, transient or timed-out call is retried with the same token next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from providers.base import (
    CapacityUnavailable,
    FatalError,
    Instance,
    InstanceState,
    LaunchRejected,
    SetupError,
)
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.lifecycle import gang_shortfall
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.controllers.base import (
    CallTimeout,
    Db,
    Result,
    job_running,
    mark_unavailable,
    pools_up,
    safe_message,
)
from scheduler.daemon.controllers.gang import (
    GangShortfall,
    mark_gang_capacity,
    new_node_row,
    record_nodes,
)
from scheduler.daemon.controllers.rows import chunks, table_of
from scheduler.daemon.controllers.spend import request_stop
from scheduler.state.audit import emit, event
from scheduler.state.models import Attempt, AttemptInstance, Job


@dataclass(frozen=True, slots=True)
class LaunchOutcome:
    attempt_id: str
    launched: bool  # an instance id is recorded (or the attempt is being retried as-is)
    pool_failed: bool = False  # capacity/quota: the job should try another offering now


class LaunchRecords:
    def __init__(self, db: Db, clock: Clock, config: Callable[[], Config]) -> None:
        self.db = db
        self.clock = clock
        self._config = config

    def record(
        self, attempt_id: str, instances: list[Instance] | None, error: Exception | None
    ) -> LaunchOutcome:
        with self.db.write() as s:
            return self.record_in(s, attempt_id, instances, error, self.clock.now())

    def record_in(
        self,
        s: Session,
        attempt_id: str,
        instances: list[Instance] | None,
        error: Exception | None,
        now: datetime,
        events: list[dict[str, Any]] | None = None,
        known: dict[str, list[AttemptInstance]] | None = None,
    ) -> LaunchOutcome:
        """Record one launch's result. `events`, when given, collects the "launched" event
        for one INSERT with the rest of the batch (the caller writes it in this session);
        `known`, the batch's node rows read at once."""
        cfg = self._config().daemon
        a = s.get(Attempt, attempt_id)
        if a is None or a.state is AttemptState.ENDED:
            return LaunchOutcome(attempt_id, launched=False)
        if error is None and instances and a.nodes > 1:
            return self._record_gang(s, a, instances, now, known)
        if isinstance(error, GangShortfall):
            return self._gang_failed(s, a, error, now)
        if error is None and instances:
            inst = instances[0]
            rows = None if known is None else known.get(attempt_id, [])
            with s.no_autoflush:  # its query never needs this batch's pending rows; a
                record_nodes(s, a, [inst], now, rows)  # flush per attempt would cost more
            a.instance_id = inst.id
            a.instance_scope = inst.scope
            a.region = inst.region or a.region
            if inst.state is InstanceState.RUNNING and a.started_at is None:
                a.state = AttemptState.RUNNING
                a.started_at = min(inst.launched_at or now, now)
                a.accrued_until = a.started_at
            s.add(a)
            if a.state is AttemptState.RUNNING and a.stop_requested_at is None:
                job_running(s, a.job_id, a.pool, a.price_per_hour, now)
            what = f"{inst.id} on {a.pool} ({a.market})"
            if events is None:
                emit(s, now, "launched", what, job_id=a.job_id, attempt_id=a.id)
            else:
                events.append(event(now, "launched", what, job_id=a.job_id, attempt_id=a.id))
            return LaunchOutcome(attempt_id, launched=True)
        if error is None:
            error = FatalError("the provider returned no instance")
        why = safe_message(error)
        if isinstance(error, CallTimeout) and not error.sent:
            # Never left the provider's queue: the cloud was not asked, so the attempt is
            # not stamped as sent (it would wait out the visibility delay for nothing).
            a.launch_requested_at = None
            msg = f"not sent: {why}; sent on the next pass"
            if a.detail != msg:
                a.detail = msg
                emit(s, now, "launch_not_sent", msg, job_id=a.job_id, attempt_id=a.id)
            s.add(a)
            return LaunchOutcome(attempt_id, launched=True)
        if isinstance(error, CapacityUnavailable):
            mark_unavailable(s, error.pool or a.pool, why, now, cfg.unavailable_ttl)
            self.fail_in(s, attempt_id, AttemptEnd.LAUNCH_FAILED, f"no capacity: {why}", now)
            return LaunchOutcome(attempt_id, launched=False, pool_failed=True)
        if isinstance(error, LaunchRejected):
            self.fail_in(s, attempt_id, AttemptEnd.REJECTED, why, now)
            return LaunchOutcome(attempt_id, launched=False)
        if isinstance(error, SetupError):
            # A missing permission or a refused setting: every pool would answer the same,
            # so none is marked out of capacity; the job waits (backed off) for the fix.
            self.fail_in(
                s, attempt_id, AttemptEnd.LAUNCH_FAILED, f"launch refused: {why}", now, "error"
            )
            return LaunchOutcome(attempt_id, launched=False)
        if isinstance(error, FatalError):
            mark_unavailable(s, a.pool, why, now, cfg.unavailable_ttl)
            self.fail_in(
                s, attempt_id, AttemptEnd.LAUNCH_FAILED, f"launch failed: {why}", now, "error"
            )
            return LaunchOutcome(attempt_id, launched=False, pool_failed=True)
        # Throttled, transient, timeout, or an adapter bug: the same token next pass.
        msg = f"{why}; will retry with the same token"
        if a.detail != msg:
            a.detail = msg
            s.add(a)
            emit(s, now, "launch_retry", msg, job_id=a.job_id, attempt_id=a.id, level="warning")
        return LaunchOutcome(attempt_id, launched=True)

    def record_late(self, attempt_id: str, instances: list[Instance]) -> None:
        """A launch call that answered after its deadline: its instances are recorded (an
        attempt asked to stop meanwhile then stops them, billed from their launch), unless
        the attempt found them already (adopted by its token) or has ended (then they are a
        leak, collected and billed to it)."""
        with self.db.write() as s:
            a = s.get(Attempt, attempt_id)
            if a is None or a.state is AttemptState.ENDED or a.instance_id is not None:
                return
            now = self.clock.now()
            emit(
                s,
                now,
                "launch_landed",
                f"the launch answered after its deadline: {', '.join(i.id for i in instances)}",
                job_id=a.job_id,
                attempt_id=a.id,
            )
            self.record_in(s, attempt_id, instances, None, now)
            if a.stop_requested_at is not None:
                # Asked to stop while the call was out: stop what it started at the next
                # stop step (the search by token before it landed found nothing).
                a.state, a.terminate_sent_at = AttemptState.STOPPING, None
                s.add(a)

    def _record_gang(
        self,
        s: Session,
        a: Attempt,
        instances: list[Instance],
        now: datetime,
        known: dict[str, list[AttemptInstance]] | None = None,
    ) -> LaunchOutcome:
        """The gang's instances, one row each; it runs when all N run (observe follows)."""
        rows = record_nodes(s, a, instances, now, None if known is None else known.get(a.id, []))
        emit(
            s,
            now,
            "launched",
            f"{len(instances)} x {a.instance_type} on {a.pool} ({a.market}): "
            + ", ".join(i.id for i in sorted(instances, key=lambda i: i.node)),
            job_id=a.job_id,
            attempt_id=a.id,
        )
        started = [r.started_at for r in rows if r.started_at is not None]
        if started and a.started_at is None:
            a.started_at = min(started)
            a.accrued_until = a.started_at
        if len(rows) < a.nodes:
            # An adapter that is not all-or-nothing returned part of the gang.
            why = gang_shortfall(len(rows), a.nodes, a.instance_type, a.zone, "came up")
            cfg = self._config().daemon
            mark_gang_capacity(s, a.pool, len(rows), why, now, cfg.unavailable_ttl)
            request_stop(s, a, "launch_failed", now)
            a.detail = why
            emit(s, now, "gang_partial", why, job_id=a.job_id, attempt_id=a.id, level="warning")
        elif (
            all(r.state is AttemptState.RUNNING for r in rows) and a.state is AttemptState.LAUNCHING
        ):
            a.state = AttemptState.RUNNING
            if a.stop_requested_at is None:
                job_running(s, a.job_id, a.pool, a.price_per_hour, now)
        s.add(a)
        return LaunchOutcome(a.id, launched=True)

    def _gang_failed(
        self, s: Session, a: Attempt, err: GangShortfall, now: datetime
    ) -> LaunchOutcome:
        """A gang that did not come up whole: what started is terminated (by the launch call,
        else by the StopController), billed until it ends, and the pool marked: for gangs of
        this size when some nodes fit, for everyone when none did."""
        cfg = self._config().daemon
        cause = err.cause
        why = safe_message(cause)
        up = [i for i in err.found if i.failure is None]
        if isinstance(cause, CapacityUnavailable) and 0 < len(up) < a.nodes:
            short = gang_shortfall(
                len(up), a.nodes, a.instance_type, a.zone, "before the capacity error"
            )
            detail = why if short in why else f"{short}: {why}"
            mark_gang_capacity(s, cause.pool or a.pool, len(up), short, now, cfg.unavailable_ttl)
        else:
            detail = (
                f"no capacity: {why}"
                if isinstance(cause, CapacityUnavailable)
                else f"launch failed: {why}"
            )
            pool = cause.pool if isinstance(cause, CapacityUnavailable) else None
            if not isinstance(cause, SetupError):  # a permission or setting: no pool's fault
                mark_unavailable(s, pool or a.pool, why, now, cfg.unavailable_ttl)
        if err.found:
            record_nodes(s, a, err.found, now)
            started = [i.launched_at for i in up if i.launched_at is not None]
            if started and a.started_at is None:
                a.started_at = a.accrued_until = min(min(started), now)
        if any(i.live for i in err.found) or not err.cleaned:
            # Still running somewhere: the attempt ends when every node has (billed to then).
            request_stop(s, a, "launch_failed", now)
            if err.cleaned:
                a.terminate_sent_at = now
            a.detail = detail[:500]
            s.add(a)
            emit(s, now, "gang_partial", detail, job_id=a.job_id, attempt_id=a.id, level="warning")
            return LaunchOutcome(a.id, launched=False)
        self.fail_in(s, a.id, AttemptEnd.LAUNCH_FAILED, detail, now)
        return LaunchOutcome(a.id, launched=False, pool_failed=True)

    def fail(
        self, attempt_id: str, end: AttemptEnd, why: str, now: datetime, level: str = "warning"
    ) -> None:
        with self.db.write() as s:
            self.fail_in(s, attempt_id, end, why, now, level)

    @staticmethod
    def fail_in(
        s: Session,
        attempt_id: str,
        end: AttemptEnd,
        why: str,
        now: datetime,
        level: str = "warning",
    ) -> None:
        a = s.get(Attempt, attempt_id)
        if a is None or a.state is AttemptState.ENDED:
            return
        a.state, a.end_reason, a.ended_at, a.detail = AttemptState.ENDED, end, now, why[:500]
        s.add(a)
        emit(s, now, f"attempt_{end.value}", why, job_id=a.job_id, attempt_id=a.id, level=level)


_RUNS_JOB = (JobState.LAUNCHING, JobState.PENDING, JobState.RECOVERING)  # as job_running


def record_launched(
    s: Session,
    results: Mapping[str, Result[list[Instance]]],
    now: datetime,
    events: list[dict[str, Any]],
) -> dict[str, LaunchOutcome]:
    """Record the common case, a single-node attempt whose launch returned its instance and
    that has no node row yet, for a whole batch in a few core statements (one read, one
    INSERT of node rows, one executemany UPDATE each of attempts and jobs): what `record_in`
    does for it through the ORM, which costs more than the launch itself. Everything else
    (gangs, errors, an attempt already recorded or ended) is left to `record_in`."""
    t, ni, jt = table_of(Attempt), table_of(AttemptInstance), table_of(Job)
    ids = [aid for aid, r in results.items() if r.error is None and r.value]
    rows: dict[str, Any] = {}
    noded: set[str] = set()
    for chunk in chunks(ids):
        q = sa.select(
            t.c.id,
            t.c.job_id,
            t.c.state,
            t.c.nodes,
            t.c.region,
            t.c.zone,
            t.c.started_at,
            t.c.accrued_until,
            t.c.stop_requested_at,
            t.c.pool,
            t.c.market,
            t.c.price_per_hour,
        ).where(t.c.id.in_(chunk))
        rows.update((r.id, r) for r in s.execute(q))
        noded.update(
            s.execute(sa.select(ni.c.attempt_id).where(ni.c.attempt_id.in_(chunk))).scalars()
        )
    nodes: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    up: list[str] = []  # pools an attempt now runs in
    out: dict[str, LaunchOutcome] = {}
    for aid in ids:
        a = rows.get(aid)
        if a is None or a.state is AttemptState.ENDED or a.nodes > 1 or aid in noded:
            continue
        inst = results[aid].value[0]  # type: ignore[index]
        nodes.append(new_node_row(aid, a.region, a.zone, inst, now))
        state, started, accrued = a.state, a.started_at, a.accrued_until
        if inst.state is InstanceState.RUNNING and started is None:
            state, started = AttemptState.RUNNING, min(inst.launched_at or now, now)
            accrued = started
        attempts.append(
            {
                "b_id": aid,
                "instance_id": inst.id,
                "instance_scope": inst.scope,
                "region": inst.region or a.region,
                "state": state,
                "started_at": started,
                "accrued_until": accrued,
            }
        )
        if state is AttemptState.RUNNING and a.stop_requested_at is None:
            running.append(
                {"b_id": a.job_id, "reason": f"on {a.pool} at ${a.price_per_hour:.2f}/h"}
            )
            up.append(a.pool)
        what = f"{inst.id} on {a.pool} ({a.market})"
        events.append(event(now, "launched", what, job_id=a.job_id, attempt_id=aid))
        out[aid] = LaunchOutcome(aid, launched=True)
    if nodes:
        s.execute(sa.insert(ni), nodes)
        s.execute(
            sa.update(t)
            .where(t.c.id == sa.bindparam("b_id"))
            .values(
                instance_id=sa.bindparam("instance_id"),
                instance_scope=sa.bindparam("instance_scope"),
                region=sa.bindparam("region"),
                state=sa.bindparam("state"),
                started_at=sa.bindparam("started_at"),
                accrued_until=sa.bindparam("accrued_until"),
            ),
            attempts,
        )
    if running:
        pools_up(s, up, now)  # outages that ended with these runs
        s.execute(
            sa.update(jt)
            .where(
                jt.c.id == sa.bindparam("b_id"), sa.or_(*(jt.c.state == st for st in _RUNS_JOB))
            )  # no IN: executemany
            .values(
                state=JobState.RUNNING,
                reason=sa.bindparam("reason"),
                updated_at=now,
                not_before=None,
            ),
            running,
        )
    return out
