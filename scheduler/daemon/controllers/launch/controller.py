"""Calls the clouds for attempts whose intent is written: claim the store, launch, record.

Order per attempt, each step durable before the next: the Attempt row (LAUNCHING, with its
deterministic token) is already committed; `owner.json` in the checkpoint store names it
(the fence); `launch_requested_at` is committed; then the cloud is called with the token;
then the instance id is recorded. A crash anywhere is repaired on the next pass: the attempt
is adopted by its token, or launched again with the same token (which the cloud treats as
the same request) while the provider's idempotency window lasts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_OWNER,
    Capabilities,
    CapacityUnavailable,
    FatalError,
    Instance,
    InstanceState,
    LaunchRejected,
    LaunchRequest,
    Market,
    Offering,
    Provider,
)
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.jobspec import JobSpec
from scheduler.core.lifecycle import gang_shortfall
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError, is_local
from scheduler.daemon.controllers.base import (
    CatalogHolder,
    Clouds,
    Db,
    Result,
    collections_paused,
    finding,
    job_running,
    launching,
    mark_unavailable,
    safe_message,
)
from scheduler.daemon.controllers.gang import (
    GangShortfall,
    launching_gang,
    mark_gang_capacity,
    new_node_row,
    nodes_of,
    record_nodes,
    request_limit_reason,
)
from scheduler.daemon.controllers.rows import chunks, load_by_id, table_of
from scheduler.daemon.controllers.spend import request_stop
from scheduler.daemon.hooks_for_tests import Steps
from scheduler.state.audit import emit, emit_many, event
from scheduler.state.models import Attempt, AttemptInstance, Job
from trainer import contract

# What launching reads of an Attempt (`launch` and `_request`): the first read of a pass
# converts these for every row, not all of the table's columns.
_LAUNCH_COLUMNS = (
    "id",
    "job_id",
    "number",
    "token",
    "provider",
    "cloud",
    "region",
    "zone",
    "instance_type",
    "market",
    "pool",
    "price_per_hour",
    "gpu_count",
    "nodes",
    "state",
    "instance_id",
    "stop_requested_at",
    "launch_requested_at",
    "created_at",
)


@dataclass(frozen=True, slots=True)
class _JobView:
    """What launching needs of an attempt's job."""

    id: str
    spec_json: str
    checkpoint_uri: str


@dataclass(slots=True)
class _Memo:
    """What the requests of one launch call share: offerings by pool, parsed specs by their
    JSON (many jobs are submitted from one spec), the owner tag as each cloud stores it."""

    offers: dict[str, Offering | None] = field(default_factory=dict)
    specs: dict[str, JobSpec] = field(default_factory=dict)
    owners: dict[int, str] = field(default_factory=dict)

    def owner_label(self, caps: Capabilities, owner: str) -> str:
        label = self.owners.get(id(caps))
        if label is None:
            label = self.owners[id(caps)] = caps.label(owner)
        return label


@dataclass(frozen=True, slots=True)
class LaunchOutcome:
    attempt_id: str
    launched: bool  # an instance id is recorded (or the attempt is being retried as-is)
    pool_failed: bool = False  # capacity/quota: the job should try another offering now


class LaunchController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        stores: CheckpointStores,
        catalog: CatalogHolder,
        config: Callable[[], Config],
        steps: Steps,
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self.stores = stores
        self.catalog = catalog
        self._config = config
        self.step = steps

    def launch(self, attempt_ids: Sequence[str]) -> list[LaunchOutcome]:
        """Launch these LAUNCHING attempts: one read, the store claims (concurrent I/O), one
        write of launch_requested_at, the cloud calls (concurrent, one deadline each), one
        write of the results. A pass costs a few transactions, not a few per job."""
        with collections_paused():
            return self._launch(attempt_ids)

    def _launch(self, attempt_ids: Sequence[str]) -> list[LaunchOutcome]:
        clouds = self._clouds()
        now = self.clock.now()
        out: list[LaunchOutcome] = []
        rows: list[tuple[Any, _JobView]] = []
        t, jt = table_of(Attempt), table_of(Job)
        with self.db.read() as s:
            # Core rows of what launching reads (read-only here: the writes below re-read).
            cols = [t.c[name] for name in _LAUNCH_COLUMNS]
            for chunk in _chunks(list(attempt_ids), 500):
                q = sa.select(*cols, jt.c.spec_json, jt.c.checkpoint_uri).where(
                    t.c.job_id == jt.c.id, t.c.id.in_(chunk)
                )
                rows.extend(
                    (r, _JobView(r.job_id, r.spec_json, r.checkpoint_uri)) for r in s.execute(q)
                )
        ready: list[tuple[Any, _JobView, Provider]] = []
        failed: list[tuple[str, AttemptEnd, str]] = []
        for a, job in rows:
            if a.state is not AttemptState.LAUNCHING or a.instance_id or a.stop_requested_at:
                out.append(LaunchOutcome(a.id, launched=a.instance_id is not None))
                continue
            provider = clouds.get(a.provider)
            if provider is None:
                failed.append(
                    (a.id, AttemptEnd.LAUNCH_FAILED, f"provider {a.provider} is not configured")
                )
                out.append(LaunchOutcome(a.id, launched=False, pool_failed=True))
                continue
            if a.nodes > provider.capabilities.max_count:
                most = provider.capabilities.max_count
                why = request_limit_reason(a.provider, most)
                failed.append((a.id, AttemptEnd.LAUNCH_FAILED, why))
                with self.db.write() as s:
                    mark_gang_capacity(
                        s, a.pool, most, why, now, self._config().daemon.unavailable_ttl
                    )
                out.append(LaunchOutcome(a.id, launched=False, pool_failed=True))
                continue
            window = provider.capabilities.idempotency_window
            if (
                a.launch_requested_at is not None
                and window is not None
                and now - a.launch_requested_at > window
            ):
                # Relaunching now could start a second instance: the cloud forgot the token.
                why = "the launch did not complete within the cloud's idempotency window"
                failed.append((a.id, AttemptEnd.LOST, why))
                out.append(LaunchOutcome(a.id, launched=False))
                continue
            ready.append((a, job, provider))
        claim_errors = self._claim(ready)
        requests: dict[str, tuple[str, LaunchRequest]] = {}
        memo = _Memo()
        with self.db.write() as s:
            # In the session at once (and held: its identity map is weak), so each s.get below
            # is a lookup, not a query and an autoflush.
            held = load_by_id(s, Attempt, [x[0] for x in failed] + list(claim_errors))
            stamped = _stamp_launch_requested(
                s, [a.id for a, _, _ in ready if a.id not in claim_errors], now
            )
            for attempt_id, end, why in failed:
                self._fail_in(s, attempt_id, end, why, now)
            for a, job, provider in ready:
                err = claim_errors.get(a.id)
                if err is not None:
                    msg = f"cannot claim the checkpoint store: {err}"
                    if now - a.created_at > self._config().daemon.launch_timeout:
                        # The job's own store is unusable: this job's problem, not the pool's.
                        self._fail_in(s, a.id, AttemptEnd.REJECTED, msg, now)
                        out.append(LaunchOutcome(a.id, launched=False))
                        continue
                    out.append(LaunchOutcome(a.id, launched=True))  # retried next pass
                    fresh_a = s.get(Attempt, a.id)
                    if fresh_a is None or fresh_a.detail == msg:
                        continue  # said once, not every pass
                    fresh_a.detail = msg
                    s.add(fresh_a)
                    emit(
                        s,
                        now,
                        "store_unwritable",
                        msg,
                        job_id=job.id,
                        attempt_id=a.id,
                        level="warning",
                    )
                    continue
                if a.id not in stamped:  # ended or asked to stop since the read
                    out.append(LaunchOutcome(a.id, launched=False))
                    continue
                requests[a.id] = (a.provider, self._request(job, a, provider, memo))
            del held
        if not requests:
            return out
        self.step("after_claim")
        results = clouds.gather(
            {
                aid: (name, launching_gang(req) if req.count > 1 else launching(req))
                for aid, (name, req) in requests.items()
            }
        )
        self.step("after_launch")
        with self.db.write() as s:
            now = self.clock.now()
            events: list[dict[str, Any]] = []
            recorded = _record_launched(s, results, now, events)
            rest = [aid for aid in results if aid not in recorded]
            held = load_by_id(s, Attempt, rest)
            jobs = load_by_id(s, Job, [a.job_id for a in held.values()])
            known = nodes_of(s, rest)
            for attempt_id, r in results.items():
                done = recorded.get(attempt_id)
                if done is None:
                    done = self._record_in(s, attempt_id, r.value, r.error, now, events, known)
                out.append(done)
            emit_many(s, events)
            del held, jobs, known
        self.step("after_record")
        return out

    def _claim(self, ready: list[tuple[Any, _JobView, Provider]]) -> dict[str, Exception]:
        """Write owner.json for each attempt; errors by attempt. Remote stores (S3) are
        written concurrently; local files in this thread, where a handoff to a pool thread
        would cost more CPU than the write itself."""
        from concurrent.futures import ThreadPoolExecutor

        many = len(ready) > 1

        def one(item: tuple[Any, _JobView, Provider]) -> tuple[str, Exception | None]:
            a, job, _ = item
            try:
                # Many claims: each unsynced, then one sync below (an fsync costs as much
                # CPU as the rest of a launch).
                self.stores.claim(job.checkpoint_uri, a.number, a.id, job.id, sync=not many)
            except StoreError as e:
                return a.id, e
            return a.id, None

        results: list[tuple[str, Exception | None]] = []
        if not many:
            results = [one(x) for x in ready]
        else:
            # Each local claim right after its check: the store's URI cache then parses
            # each URI once, however many more jobs than its size the pass launches.
            remote: list[tuple[Any, _JobView, Provider]] = []
            local = False
            for x in ready:
                if is_local(x[1].checkpoint_uri):
                    results.append(one(x))
                    local = True
                else:
                    remote.append(x)
            if remote:
                with ThreadPoolExecutor(max_workers=min(8, len(remote))) as pool:
                    results.extend(pool.map(one, remote))
            if local:
                self.stores.sync_local()  # every fence is durable before any cloud call
        return {aid: e for aid, e in results if e is not None}

    def _request(
        self, job: _JobView | Job, a: Any, provider: Provider, memo: _Memo | None = None
    ) -> LaunchRequest:
        """The launch request for attempt `a` (an Attempt or a row of its columns)."""
        memo = _Memo() if memo is None else memo
        spec = memo.specs.get(job.spec_json)
        if spec is None:
            spec = memo.specs[job.spec_json] = JobSpec.model_validate_json(job.spec_json)
        if a.pool not in memo.offers:
            memo.offers[a.pool] = self.catalog.catalog.offering_for_pool(a.pool)
        o = memo.offers[a.pool] or Offering(
            a.cloud,
            a.region,
            a.zone,
            a.instance_type,
            "",
            a.gpu_count,
            0,
            0,
            0,
            Market(a.market),
            a.price_per_hour,
            a.created_at,
        )
        # The store's endpoint first: a job's own env may point its instances elsewhere.
        env = {**self.stores.instance_env(job.checkpoint_uri), **spec.env}
        env.update(
            {
                contract.ENV_JOB_ID: job.id,
                contract.ENV_ATTEMPT: str(a.number),
                contract.ENV_CHECKPOINT_URI: job.checkpoint_uri,
                contract.ENV_CLOUD: a.cloud,
                contract.ENV_NNODES: str(a.nodes),
            }
        )
        caps = provider.capabilities
        tags = {
            TAG_JOB: caps.label(job.id),
            TAG_ATTEMPT: caps.label(a.id),
            TAG_OWNER: memo.owner_label(caps, self._config().daemon.owner),
        }
        group = None
        if a.nodes > 1:
            # Every node: the gang's size and one rendezvous id; the provider adds each
            # node's rank and node 0's address (contract.ENV_NODE_RANK, ENV_RDZV_ENDPOINT).
            env[contract.ENV_RDZV_ID] = a.id
            if caps.placement_groups:
                group = caps.label(f"spotwise-{a.id}")
        else:
            tags[TAG_NODE] = "0"
        return LaunchRequest(
            token=a.token,
            offering=o,
            command=list(spec.command),  # specs are shared within a call
            env=env,
            tags=tags,
            count=a.nodes,
            placement_group=group,
        )

    def _record(
        self, attempt_id: str, instances: list[Instance] | None, error: Exception | None
    ) -> LaunchOutcome:
        with self.db.write() as s:
            return self._record_in(s, attempt_id, instances, error, self.clock.now())

    def _record_in(
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
        if isinstance(error, CapacityUnavailable):
            mark_unavailable(s, error.pool or a.pool, why, now, cfg.unavailable_ttl)
            self._fail_in(s, attempt_id, AttemptEnd.LAUNCH_FAILED, f"no capacity: {why}", now)
            return LaunchOutcome(attempt_id, launched=False, pool_failed=True)
        if isinstance(error, LaunchRejected):
            self._fail_in(s, attempt_id, AttemptEnd.REJECTED, why, now)
            return LaunchOutcome(attempt_id, launched=False)
        if isinstance(error, FatalError):
            mark_unavailable(s, a.pool, why, now, cfg.unavailable_ttl)
            self._fail_in(
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
        self._fail_in(s, a.id, AttemptEnd.LAUNCH_FAILED, detail, now)
        return LaunchOutcome(a.id, launched=False, pool_failed=True)

    def _fail(
        self, attempt_id: str, end: AttemptEnd, why: str, now: datetime, level: str = "warning"
    ) -> None:
        with self.db.write() as s:
            self._fail_in(s, attempt_id, end, why, now, level)

    @staticmethod
    def _fail_in(
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
                self._record(a.id, found, None)
                continue
            delay = clouds.providers[a.provider].capabilities.visibility_delay
            since = a.launch_requested_at or a.created_at
            if now - since < delay:
                continue  # the launch may not be visible yet; never launch twice
            if now - a.created_at > self._config().daemon.launch_timeout:
                self._fail(
                    a.id, AttemptEnd.LAUNCH_FAILED, "the launch did not complete in time", now
                )
                continue
            left.append(a.id)
        return left


def _stamp_launch_requested(s: Session, attempt_ids: list[str], now: datetime) -> set[str]:
    """Set launch_requested_at on those still LAUNCHING and not asked to stop (re-checked
    in this transaction); returns their ids. One UPDATE per chunk, not a load per row."""
    t = table_of(Attempt)
    ok = (t.c.state == AttemptState.LAUNCHING) & t.c.stop_requested_at.is_(None)
    out: set[str] = set()
    for chunk in chunks(attempt_ids):
        q = sa.update(t).where(t.c.id.in_(chunk), ok).values(launch_requested_at=now)
        if s.get_bind().dialect.update_returning:
            out.update(s.execute(q.returning(t.c.id)).scalars())
        else:  # no UPDATE ... RETURNING: read which qualify under the same lock, then write
            out.update(s.execute(sa.select(t.c.id).where(t.c.id.in_(chunk), ok)).scalars())
            s.execute(q)
    return out


_RUNS_JOB = (JobState.LAUNCHING, JobState.PENDING, JobState.RECOVERING)  # as job_running


def _record_launched(
    s: Session,
    results: Mapping[str, Result[list[Instance]]],
    now: datetime,
    events: list[dict[str, Any]],
) -> dict[str, LaunchOutcome]:
    """Record the common case, a single-node attempt whose launch returned its instance and
    that has no node row yet, for a whole batch in a few core statements (one read, one
    INSERT of node rows, one executemany UPDATE each of attempts and jobs): what `_record_in`
    does for it through the ORM, which costs more than the launch itself. Everything else
    (gangs, errors, an attempt already recorded or ended) is left to `_record_in`."""
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


def _chunks(items: list[str], n: int) -> list[list[str]]:
    return [items[i : i + n] for i in range(0, len(items), n)]
