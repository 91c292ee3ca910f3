"""Brings live attempts in line with what the clouds report: starts, notices, ends.

An instance the cloud does not show is "not visible yet" while the attempt's launch is
younger than the provider's visibility delay; the launch time comes from the database, so a
restart never turns a seconds-old launch into a lost one (and a second launch).

A gang (an attempt with N nodes) runs once all N run; when any node gets a notice or is lost,
the others are told to checkpoint (a "peer" stop: terminate, which the trainer answers with
the common checkpoint on the step every rank agreed on), and the attempt ends when every node
has, classified from all of them (lifecycle.classify_gang). A gang not whole within the
launch timeout is stopped and its pool marked.

One file, over 600 lines, unlike the job and launch controllers: it is one phase (the
clouds' listing, then what it says written back), and its single-instance and gang paths
share the store reads made before the transaction, the wait for an unreadable store and the
billing to an end; kept apart, code that has to change together would sit in two files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from providers.base import (
    EndReason,
    FailureKind,
    Instance,
    InstanceState,
    LaunchFailure,
    Market,
    ResourceRef,
)
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.lifecycle import PEER_STOP, Ended, classify_end, classify_gang, gang_shortfall
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import (
    LIVE,
    WRITE_BATCH,
    Clouds,
    Db,
    Observations,
    SaidOnce,
    describing,
    hours,
    job_running,
    mark_unavailable,
    safe_message,
)
from scheduler.daemon.controllers.gang import (
    GangLossHook,
    classified_rows,
    current_rows,
    mark_gang_capacity,
    nodes_of,
    observe_node,
    record_nodes,
)
from scheduler.daemon.controllers.spend import request_stop
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, AttemptInstance, Job, PoolState

log = logging.getLogger("spotwise.reconcile")
_NOT_RECORDED = "attempt %s: recording what the cloud said failed; retried next pass"


@dataclass(frozen=True, slots=True)
class _Live:
    attempt_id: str
    job_id: str
    number: int
    provider: str
    ref: ResourceRef
    since: datetime  # when the launch was asked for (visibility grace counts from here)
    checkpoint_uri: str
    stop_reason: str | None
    stop_requested_at: datetime | None
    # What the database already says (so a pass writes only what changed)
    launching: bool = False
    started: bool = False
    noticed: bool = False
    signalled: bool = False  # an early signal is recorded


class InstanceController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        stores: CheckpointStores,
        config: Callable[[], Config],
        bill_to_end: Callable[[Session, datetime, list[str]], None],
        observations: Observations | None = None,
        on_gang_loss: GangLossHook | None = None,
    ) -> None:
        self._config = config
        self.observations = observations or Observations()
        self.said = SaidOnce()  # describe_failed, once per reason and provider
        # Nodes of a running gang lost or noticed: True when they are being replaced
        # (GangRecovery.on_loss); otherwise the others are stopped and the gang re-placed.
        self._on_gang_loss = on_gang_loss
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self.stores = stores
        # Bills attempts whose end this controller writes up to that end, in the same write
        # (SpendController.bill_to_end): an accrual may have charged past it already.
        self._bill_to_end = bill_to_end

    def observe(self) -> None:
        clouds = self._clouds()
        with self.db.read() as s:
            rows = s.exec(
                select(Attempt, Job.checkpoint_uri)
                .where(Attempt.job_id == Job.id, col(Attempt.state).in_(LIVE))
                .where(col(Attempt.instance_id).is_not(None))
            ).all()
        gangs = [(a, uri) for a, uri in rows if a.nodes > 1]
        with self.db.read() as s:
            nodes = nodes_of(s, [a.id for a, _ in gangs]) if gangs else {}
        live = [
            _Live(
                a.id,
                a.job_id,
                a.number,
                a.provider,
                ResourceRef(a.instance_id or "", a.region, a.zone, a.instance_scope, a.started_at),
                a.launch_requested_at or a.created_at,
                uri,
                a.stop_reason,
                a.stop_requested_at,
                a.state is AttemptState.LAUNCHING,
                a.started_at is not None,
                a.notice_at is not None,
                a.early_signal_at is not None,
            )
            for a, uri in rows
            if a.nodes <= 1
        ]
        by_provider: dict[str, list[_Live]] = {}
        for x in live:
            by_provider.setdefault(x.provider, []).append(x)
        refs: dict[str, list[ResourceRef]] = {
            n: [x.ref for x in xs] for n, xs in by_provider.items()
        }
        for a, _ in gangs:
            for n in nodes.get(a.id, []):
                if n.instance_id and n.state is not AttemptState.ENDED:
                    refs.setdefault(a.provider, []).append(
                        ResourceRef(n.instance_id, n.region, n.zone, n.instance_scope, n.started_at)
                    )
        asked = self.clock.now()
        results = clouds.gather(
            {
                name: (name, describing(rs))
                for name, rs in refs.items()
                if clouds.get(name) is not None
            }
        )
        now = self.clock.now()
        failed = {n: r.error for n, r in results.items() if r.error is not None}
        said = []
        for name, err in failed.items():
            self.observations.failed(name)
            msg = f"{name}: {safe_message(err)}"
            if self.said.first(name, msg):
                said.append(msg)
        if said:
            with self.db.write() as s:
                for msg in said:
                    emit(s, now, "describe_failed", msg, level="warning")
        todo: list[tuple[_Live, Instance]] = []
        for name, xs in by_provider.items():
            r = results.get(name)
            if r is None or r.value is None:
                continue
            seen = {i.id: i for i in r.value}
            delay = clouds.providers[name].capabilities.visibility_delay
            for x in xs:
                inst = seen.get(x.ref.id)
                if inst is None:
                    continue
                if inst.state is InstanceState.NOT_FOUND and now - x.since < delay:
                    continue  # launched moments ago; eventually consistent API
                todo.append((x, inst))
        self._apply_all(todo, now)
        for a, uri in gangs:
            r = results.get(a.provider)
            open_nodes = [n for n in nodes.get(a.id, []) if n.state is not AttemptState.ENDED]
            if open_nodes and (r is None or r.value is None):
                continue  # cannot tell this pass
            seen = {i.id: i for i in (r.value or [])} if r is not None else {}
            delay = clouds.providers[a.provider].capabilities.visibility_delay
            since = a.launch_requested_at or a.created_at
            views: dict[str, Instance] = {}  # by node row: a replaced node has two
            for row in nodes.get(a.id, []):
                inst = seen.get(row.instance_id or "")
                if inst is None or row.state is AttemptState.ENDED:
                    continue
                if inst.state is InstanceState.NOT_FOUND and now - since < delay:
                    continue
                views[row.id] = inst
            self._apply_gang(a, uri, nodes.get(a.id, []), views, now)
        answered = [n for n, r in results.items() if r.error is None]
        for name in answered:
            self.said.forget(name)
        if answered:
            with self.db.write() as s:  # spend accrues up to here (Observations)
                self.observations.record(s, answered, asked)

    def _apply_gang(
        self,
        a: Attempt,
        uri: str,
        rows: list[AttemptInstance],
        views: dict[str, Instance],
        now: datetime,
    ) -> None:
        """One gang: its nodes' rows follow the cloud, then the gang follows its nodes."""
        gone = (InstanceState.ENDED, InstanceState.NOT_FOUND)
        all_end = bool(rows) and all(
            r.state is AttemptState.ENDED or (r.id in views and views[r.id].state in gone)
            for r in rows
        )
        done, code = False, None
        unreadable: StoreError | None = None
        if all_end:  # store I/O, outside the transaction
            try:
                done = self.stores.done(uri, a.job_id)
                if not done:
                    code = self.stores.exit_code(uri, a.number, a.job_id)
            except StoreError as e:
                unreadable = e
        cfg = self._config().daemon
        with self.db.write() as s:
            fresh = s.get(Attempt, a.id)
            if fresh is None or fresh.state not in LIVE:
                return
            a = fresh
            mine = s.exec(
                select(AttemptInstance)
                .where(AttemptInstance.attempt_id == a.id)
                .order_by(col(AttemptInstance.node), col(AttemptInstance.round))
            ).all()
            failures: dict[str, LaunchFailure] = {}
            node_ended = False
            for r in mine:
                inst = views.get(r.id)
                if inst is None:
                    continue
                if inst.failure is not None:
                    failures[r.id] = inst.failure
                was = r.state
                observe_node(r, inst, now)
                s.add(r)
                if was is not AttemptState.ENDED and r.state is AttemptState.ENDED:
                    node_ended = True
                    emit(
                        s,
                        now,
                        "node_ended",
                        f"node {r.node} of {a.nodes} ({r.instance_id}) ended: "
                        f"{r.end_reason}"
                        + (f" (exit {r.exit_code})" if r.exit_code is not None else ""),
                        job_id=a.job_id,
                        attempt_id=a.id,
                    )
            started = [r.started_at for r in mine if r.started_at is not None]
            if started and a.started_at is None:
                a.started_at = a.accrued_until = min(started)
            # What the gang is now: a node replaced in a later round is its replacement; the
            # row it superseded bills until it ends but no longer speaks for the gang.
            current = current_rows(mine)
            noticed = [r for r in current if r.notice_at is not None]
            if noticed and a.notice_at is None:
                first = min(noticed, key=lambda r: r.notice_at)  # type: ignore[arg-type,return-value]
                a.notice_at = first.notice_at
                emit(
                    s,
                    now,
                    "interruption_notice",
                    f"{a.pool}: the cloud will reclaim node {first.node} of {a.nodes} "
                    f"({first.instance_id}); the whole gang is checkpointing",
                    job_id=a.job_id,
                    attempt_id=a.id,
                    level="warning",
                )
            if mine and all(r.state is AttemptState.ENDED for r in mine):
                if unreadable is None:
                    self._end_gang(s, a, list(mine), failures, done, code, now)
                    self._bill_to_end(s, now, [a.id])
                else:
                    ends = [r.ended_at for r in mine if r.ended_at is not None]
                    self._await_store(s, a, max(ends, default=now), unreadable, now)
                return
            if node_ended:  # one node's end, while its peers run: billed to its end now
                self._bill_to_end(s, now, [a.id])
            lost = [r for r in current if r.state is AttemptState.ENDED and _lost_node(r)]
            losses = list({r.id: r for r in noticed + lost}.values())
            if (
                losses
                and a.stop_requested_at is None
                and self._on_gang_loss is not None
                and self._on_gang_loss(s, a, list(mine), losses, now)
            ):
                # Replacing them (gang_recovery): the others keep running, the gang goes on.
                noticed, lost = [], []
            if (noticed or lost) and a.stop_requested_at is None:
                # Tell the other nodes to checkpoint: the common checkpoint, then re-place.
                request_stop(s, a, PEER_STOP, now)
                which = noticed[0] if noticed else lost[0]
                what = "got an interruption notice" if noticed else f"ended ({which.end_reason})"
                emit(
                    s,
                    now,
                    "gang_stop",
                    f"node {which.node} of {a.nodes} {what}: stopping the other nodes after "
                    "one common checkpoint",
                    job_id=a.job_id,
                    attempt_id=a.id,
                    level="warning",
                )
            up = [r for r in mine if r.state is AttemptState.RUNNING]
            if len(up) >= a.nodes and a.state is AttemptState.LAUNCHING:
                a.state = AttemptState.RUNNING
                if a.stop_requested_at is None:
                    job_running(s, a.job_id, a.pool, a.price_per_hour, now)
                emit(
                    s,
                    now,
                    "running",
                    f"all {a.nodes} nodes on {a.pool}",
                    job_id=a.job_id,
                    attempt_id=a.id,
                )
            timeout = cfg.launch_timeout
            if (
                a.state is AttemptState.LAUNCHING
                and a.stop_requested_at is None
                and now - a.created_at > timeout
            ):
                # Not whole in time: stop the nodes that did come up (billed until they end).
                why = gang_shortfall(
                    len(up), a.nodes, a.instance_type, a.zone, f"came up within {timeout}"
                )
                request_stop(s, a, "launch_timeout", now)
                a.detail = why
                if up:
                    mark_gang_capacity(s, a.pool, len(up), why, now, cfg.unavailable_ttl)
                else:
                    mark_unavailable(s, a.pool, why, now, cfg.unavailable_ttl)
                emit(
                    s, now, "launch_timeout", why, job_id=a.job_id, attempt_id=a.id, level="warning"
                )
            s.add(a)

    def _end_gang(
        self,
        s,  # type: ignore[no-untyped-def]
        a: Attempt,
        rows: list[AttemptInstance],
        failures: dict[str, LaunchFailure],
        done: bool,
        code: int | None,
        now: datetime,
    ) -> None:
        facts = [
            Ended(
                _reason(r.end_reason),
                r.exit_code if r.exit_code is not None else code,
                done,
                None,
                (f.kind if (f := failures.get(r.id)) is not None else None)
                or (FailureKind.FATAL if r.end_reason == EndReason.LAUNCH_FAILED.value else None),
            )
            for r in classified_rows(rows)
        ]
        # An end the cloud reported from before our stop was not our stop's doing.
        ours = a.stop_reason
        if a.stop_requested_at is not None and all(
            r.ended_at is not None and r.ended_at < a.stop_requested_at for r in rows
        ):
            ours = None
        end = classify_gang(facts, ours)
        a.state = AttemptState.ENDED
        a.ended_at = max((r.ended_at for r in rows if r.ended_at is not None), default=now)
        if a.started_at is not None and a.ended_at < a.started_at:
            a.ended_at = a.started_at
        a.end_reason = end
        a.exit_code = code if code is not None else rows[0].exit_code
        s.add(a)
        if end is AttemptEnd.LAUNCH_FAILED and failures:
            self._gang_launch_failed(s, a, list(failures.values()), now)
        if a.market == Market.SPOT.value:
            ps = s.get(PoolState, a.pool) or PoolState(pool=a.pool)
            # Learned per node-hour: a gang of N is N nodes' exposure, one interruption.
            ps.exposure_hours += sum(
                max(0.0, hours(r.ended_at - r.started_at))
                for r in rows
                if r.started_at is not None and r.ended_at is not None
            )
            if end is AttemptEnd.INTERRUPTED:
                ps.interruptions += 1
                ps.last_interrupted_at = a.ended_at
                ps.outage_since = ps.outage_since or a.ended_at  # until a launch there runs
            s.add(ps)
        emit(
            s,
            now,
            f"attempt_{end.value}",
            f"gang of {a.nodes} on {a.pool} ended: {end.value}",
            job_id=a.job_id,
            attempt_id=a.id,
            level="warning" if end in (AttemptEnd.INTERRUPTED, AttemptEnd.LOST) else "info",
        )

    def _gang_launch_failed(
        self, s: Session, a: Attempt, failures: list[LaunchFailure], now: datetime
    ) -> None:
        """A gang whose launch failed after it returned (GCE's bulk operation, an Azure node's
        allocation): the pool is marked for gangs larger than what it held, or for everyone
        when it held none; a permission or setting marks nothing."""
        f = next((x for x in failures if x.kind in (FailureKind.CAPACITY, FailureKind.QUOTA)),
                 failures[0])  # fmt: skip
        a.detail = f.message[:500]
        s.add(a)
        if f.kind is FailureKind.SETUP:
            return
        ttl = self._config().daemon.unavailable_ttl
        if f.held is not None and 0 < f.held < a.nodes:
            what = "before the capacity error"
            why = gang_shortfall(f.held, a.nodes, a.instance_type, a.zone, what)
            mark_gang_capacity(s, f.pool or a.pool, f.held, why, now, ttl)
        else:
            mark_unavailable(s, f.pool or a.pool, f.message, now, ttl)

    def _apply_all(self, items: list[tuple[_Live, Instance]], now: datetime) -> None:
        """Record what the listing showed: store reads first (I/O, outside any transaction),
        then a batch of attempts per transaction, so a wave of thousands of instances
        starting or being reclaimed is a few commits, not one each. A batch that fails is
        written again attempt by attempt: one bad attempt is logged alone."""
        ready: list[tuple[_Live, Instance, Ended | None]] = []
        for x, inst in items:
            try:
                prepared = self._prepare(x, inst, now)
            except CrashForTest:
                raise
            except Exception:
                log.exception(_NOT_RECORDED, x.attempt_id)
                continue
            if prepared is not None:
                ready.append(prepared)
        for k in range(0, len(ready), WRITE_BATCH):
            batch = ready[k : k + WRITE_BATCH]
            try:
                self._write(batch, now)
                continue
            except CrashForTest:
                raise
            except Exception:
                if len(batch) == 1:
                    log.exception(_NOT_RECORDED, batch[0][0].attempt_id)
                    continue
            for one in batch:
                try:
                    self._write([one], now)
                except CrashForTest:
                    raise
                except Exception:
                    log.exception(_NOT_RECORDED, one[0].attempt_id)

    def _prepare(
        self, x: _Live, inst: Instance, now: datetime
    ) -> tuple[_Live, Instance, Ended | None] | None:
        """What to write for one attempt (None: nothing). An ended instance's outcome is
        read from the checkpoint store here, before any transaction."""
        if (
            inst.state is InstanceState.RUNNING
            and not x.launching
            and x.started
            and (inst.notice_at is None or x.noticed)
            and (inst.early_signal_at is None or x.signalled)
        ):
            return None  # running, as already recorded: `_running` would change nothing
        if inst.state not in (InstanceState.ENDED, InstanceState.NOT_FOUND):
            return (x, inst, None)
        try:
            return (x, inst, self._ended_facts(x, inst))
        except CrashForTest:
            raise
        except Exception as e:  # StoreError, or a store file we cannot parse
            with self.db.write() as s:
                a = s.get(Attempt, x.attempt_id)
                if a is not None:
                    self._await_store(s, a, min(inst.ended_at or now, now), e, now)
            return None

    def _await_store(
        self, s: Session, a: Attempt, ended_at: datetime, error: Exception, now: datetime
    ) -> None:
        """The instance (every node of a gang) ended but its store cannot be read: billing
        stops at the end, billed to it in this write, and the outcome waits for the store (said
        once per reason, not every pass)."""
        if a.ended_at is None:
            a.ended_at = ended_at
            self._bill_to_end(s, now, [a.id])
        msg = f"cannot read the checkpoint store ({error}); will retry"
        if a.detail != msg:
            a.detail = msg
            emit(s, now, "store_unreadable", msg, job_id=a.job_id, attempt_id=a.id, level="warning")
        s.add(a)

    def _write(self, batch: list[tuple[_Live, Instance, Ended | None]], now: datetime) -> None:
        """One transaction for the batch: its attempts, node rows and pool states read in
        three queries (the per-attempt lookups below then hit the session, not the database,
        except for a pool seen for the first time)."""
        ids = [x.attempt_id for x, _, _ in batch]
        with self.db.write() as s:
            attempts = {a.id: a for a in s.exec(select(Attempt).where(col(Attempt.id).in_(ids)))}
            nodes = nodes_of(s, ids)
            pools = sorted({a.pool for a in attempts.values() if a.market == Market.SPOT.value})
            # Held here: the session's identity map is weak, so unreferenced rows would go.
            held = (
                list(s.exec(select(PoolState).where(col(PoolState.pool).in_(pools))))
                if pools
                else []
            )
            for x, inst, facts in batch:
                a = attempts.get(x.attempt_id)
                if a is None or a.state not in LIVE:
                    continue
                known = nodes.get(a.id, [])
                if facts is None:
                    self._running(s, a, inst, now, known)
                else:
                    self._end(s, a, inst, facts, now, known)
            self._bill_to_end(s, now, [x.attempt_id for x, _, facts in batch if facts is not None])
            del held

    def _ended_facts(self, x: _Live, inst: Instance) -> Ended:
        """What the cloud said plus what the job's wrapper left in the store (I/O: called
        outside any transaction)."""
        done = self.stores.done(x.checkpoint_uri, x.job_id)
        code = inst.exit_code
        if code is None and not done:
            code = self.stores.exit_code(x.checkpoint_uri, x.number, x.job_id)
        reason = inst.end_reason if inst.state is InstanceState.ENDED else EndReason.UNKNOWN
        failure = inst.failure.kind if inst.failure is not None else None
        return Ended(
            reason, code, done, our_stop(x.stop_reason, x.stop_requested_at, inst), failure
        )

    def _running(self, s, a: Attempt, inst: Instance, now: datetime, known=None) -> None:  # type: ignore[no-untyped-def]
        if inst.state is InstanceState.RUNNING and a.started_at is None:
            record_nodes(s, a, [inst], now, known)  # node 0's row follows the attempt
        if inst.state is InstanceState.RUNNING and a.state is AttemptState.LAUNCHING:
            a.state = AttemptState.RUNNING
            if a.stop_requested_at is None:
                job_running(s, a.job_id, a.pool, a.price_per_hour, now)
        if inst.state is InstanceState.RUNNING and a.started_at is None:
            # Billed from when the cloud started it, not from when we first saw it.
            a.started_at = min(inst.launched_at or now, now)
            a.accrued_until = a.started_at
            emit(
                s, now, "running", f"{a.instance_id} on {a.pool}", job_id=a.job_id, attempt_id=a.id
            )
        timeout = self._config().daemon.launch_timeout
        if (
            inst.state is InstanceState.PENDING
            and a.stop_requested_at is None
            and now - a.created_at > timeout
        ):
            # A launch that never completes (a GCE operation, an Azure poller stuck): stop
            # what may start, count it as a failed launch, and try the pool again later.
            request_stop(s, a, "launch_timeout", now)
            why = f"the launch did not complete within {timeout}"
            a.detail = why
            mark_unavailable(s, a.pool, why, now, self._config().daemon.unavailable_ttl)
            emit(s, now, "launch_timeout", why, job_id=a.job_id, attempt_id=a.id, level="warning")
        if inst.notice_at is not None and a.notice_at is None:
            a.notice_at = inst.notice_at
            emit(
                s,
                now,
                "interruption_notice",
                f"{a.pool}: the cloud will reclaim {a.instance_id}; the job is checkpointing",
                job_id=a.job_id,
                attempt_id=a.id,
                level="warning",
            )
        if inst.early_signal_at is not None and a.early_signal_at is None:
            a.early_signal_at = inst.early_signal_at  # the job step decides what to do
            emit(
                s,
                now,
                "early_signal",
                f"{a.pool}: rebalance recommended for {a.instance_id}; the job saves early",
                job_id=a.job_id,
                attempt_id=a.id,
            )
        s.add(a)

    def _end(self, s, a: Attempt, inst: Instance, facts: Ended, now: datetime, known=None) -> None:  # type: ignore[no-untyped-def]
        end = classify_end(facts)
        record_nodes(s, a, [inst], now, known)
        a.state = AttemptState.ENDED
        ended_at = min(inst.ended_at or now, now)
        # An end already recorded (the store was unreadable then) stands: a cloud that has
        # forgotten the instance since has no end time, and billing must not resume.
        a.ended_at = ended_at if a.ended_at is None else min(a.ended_at, ended_at)
        if a.started_at is None and end not in (AttemptEnd.LAUNCH_FAILED, AttemptEnd.REJECTED):
            # Ended before we saw it run: bill from the cloud's launch time, if it has one.
            a.started_at = (
                inst.launched_at if inst.launched_at and inst.launched_at <= a.ended_at else None
            )
            a.accrued_until = a.started_at
        if a.started_at is not None and a.ended_at < a.started_at:
            a.ended_at = a.started_at
        a.end_reason = end
        a.exit_code = facts.exit_code
        if inst.failure is not None:
            a.detail = inst.failure.message[:500]
        elif inst.state is InstanceState.NOT_FOUND:
            a.detail = "the cloud no longer knows the instance"
        s.add(a)
        self._learn_pool(s, a, end)
        if (
            end in (AttemptEnd.LAUNCH_FAILED,)
            and inst.failure is not None
            and inst.failure.kind is not FailureKind.SETUP  # a permission: no pool's fault
        ):
            mark_unavailable(
                s,
                inst.failure.pool or a.pool,
                inst.failure.message,
                now,
                self._config().daemon.unavailable_ttl,
            )
        code = f" (exit {facts.exit_code})" if facts.exit_code is not None else ""
        emit(
            s,
            now,
            f"attempt_{end.value}",
            f"{a.instance_id} on {a.pool} ended: {end.value}{code}",
            job_id=a.job_id,
            attempt_id=a.id,
            level="warning" if end in (AttemptEnd.INTERRUPTED, AttemptEnd.LOST) else "info",
        )

    @staticmethod
    def _learn_pool(s, a: Attempt, end: AttemptEnd) -> None:  # type: ignore[no-untyped-def]
        if a.market != Market.SPOT.value or a.started_at is None:
            return
        ps = s.get(PoolState, a.pool) or PoolState(pool=a.pool)
        ps.exposure_hours += max(0.0, hours((a.ended_at or a.started_at) - a.started_at))
        if end is AttemptEnd.INTERRUPTED:
            ps.interruptions += 1
            ps.last_interrupted_at = a.ended_at
            ps.outage_since = ps.outage_since or a.ended_at  # until a launch there runs
        s.add(ps)


def our_stop(reason: str | None, asked_at: datetime | None, inst: Instance) -> str | None:
    """Why we stopped the attempt, if its instance ended because we did: one the cloud had
    already taken back (or that exited) before we asked keeps the cloud's end reason (an
    outage's late budget stop must not turn an interruption into a `budget` end)."""
    if reason is None or asked_at is None:
        return reason
    if inst.state is InstanceState.ENDED and inst.ended_at is not None and inst.ended_at < asked_at:
        return None
    return reason


def _reason(value: str | None) -> EndReason:
    try:
        return EndReason(value or EndReason.UNKNOWN.value)
    except ValueError:
        return EndReason.UNKNOWN


def _lost_node(r: AttemptInstance) -> bool:
    """A node whose end takes the gang down with it: taken back, lost, or failed. A clean
    exit (0, or no code yet) is left alone: its peers are finishing the same last step."""
    if r.exit_code is not None:
        return r.exit_code != 0
    return r.end_reason not in (EndReason.EXITED.value,)
