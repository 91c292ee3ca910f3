"""Calls the clouds for attempts whose intent is written: claim the store, launch, record.

Order per attempt, each step durable before the next: the Attempt row (LAUNCHING, with its
deterministic token) is already committed; `owner.json` in the checkpoint store names it
(the fence); `launch_requested_at` is committed; then the cloud is called with the token;
then the instance id is recorded. A crash anywhere is repaired on the next pass: the attempt
is adopted by its token, or launched again with the same token (which the cloud treats as
the same request) while the provider's idempotency window lasts.

The phases, one module each: `request` (what the cloud is asked for), `claims` (the store's
fence and `launch_requested_at`), `records` (the cloud's answer written down) and
`adoption` (launches asked for but never recorded); this module is the launch pass that
runs them in order, a few transactions per pass, not a few per job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import sqlalchemy as sa

from providers.base import LaunchRequest, Provider
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.jobspec import StoredSpecInvalid
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.checkpoints import CheckpointStores
from scheduler.daemon.controllers.base import (
    CallTimeout,
    CatalogHolder,
    Clouds,
    Db,
    collections_paused,
    launching,
    safe_message,
)
from scheduler.daemon.controllers.gang import (
    launching_gang,
    mark_gang_capacity,
    nodes_of,
    request_limit_reason,
)
from scheduler.daemon.controllers.launch.adoption import Adoption
from scheduler.daemon.controllers.launch.claims import claim_stores, stamp_launch_requested
from scheduler.daemon.controllers.launch.handover import Handover, claim_wait, read_pending
from scheduler.daemon.controllers.launch.records import (
    LaunchOutcome,
    LaunchRecords,
    record_launched,
)
from scheduler.daemon.controllers.launch.request import JobView, LaunchRequests, RequestMemo
from scheduler.daemon.controllers.rows import load_by_id, table_of
from scheduler.daemon.hooks_for_tests import Steps
from scheduler.state import store_use
from scheduler.state.audit import emit, emit_many
from scheduler.state.models import Attempt, Job

log = logging.getLogger("spotwise.reconcile")

# What launching reads of an Attempt (`launch` and `LaunchRequests.build`): the first read of a pass
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
    "checkpoint_interval_s",
    "claim_pending",
)


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
        install_id: str = "",
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self.stores = stores
        self.catalog = catalog
        self._config = config
        self.step = steps
        self.requests = LaunchRequests(stores, catalog, config, install_id)
        self.records = LaunchRecords(db, clock, config)
        self.adoption = Adoption(db, clock, clouds, config, self.records)
        self.handover = Handover(db, clock, clouds, stores, config)
        # Launch calls past their deadline still on the wire, by attempt (this process's
        # threads: a restarted daemon has none, and adopts by token instead).
        self._in_flight: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()

    def in_flight(self, attempt_id: str) -> bool:
        """Whether this attempt's launch call is still on the wire (past its deadline): its
        attempt must not be ended, nor launched again, until it lands."""
        with self._lock:
            return attempt_id in self._in_flight

    def _watch(self, attempt_id: str, call: Future[Any]) -> None:
        with self._lock:
            self._in_flight[attempt_id] = call
        call.add_done_callback(lambda done: self._landed(attempt_id, done))

    def _landed(self, attempt_id: str, call: Future[Any]) -> None:
        """Runs on the cloud's worker thread when a late launch call returns."""
        try:
            if not call.cancelled() and call.exception() is None and call.result():
                self.records.record_late(attempt_id, list(call.result()))
        except Exception:
            log.exception("attempt %s: recording a late launch failed", attempt_id)
        finally:
            with self._lock:
                self._in_flight.pop(attempt_id, None)

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
        rows: list[tuple[Any, JobView]] = []
        t, jt = table_of(Attempt), table_of(Job)
        with self.db.read() as s:
            # Core rows of what launching reads (read-only here: the writes below re-read).
            cols = [t.c[name] for name in _LAUNCH_COLUMNS]
            for chunk in _chunks(list(attempt_ids), 500):
                q = sa.select(*cols, jt.c.spec_json, jt.c.checkpoint_uri).where(
                    t.c.job_id == jt.c.id, t.c.id.in_(chunk)
                )
                rows.extend(
                    (r, JobView(r.job_id, r.spec_json, r.checkpoint_uri)) for r in s.execute(q)
                )
        ready: list[tuple[Any, JobView, Provider]] = []
        failed: list[tuple[str, AttemptEnd, str]] = []
        for a, job in rows:
            if a.state is not AttemptState.LAUNCHING or a.instance_id or a.stop_requested_at:
                out.append(LaunchOutcome(a.id, launched=a.instance_id is not None))
                continue
            provider = clouds.get(a.provider)
            if provider is None or a.provider in clouds.observe_only:
                why = (
                    f"provider {a.provider} is not configured"
                    if provider is None
                    else f"provider {a.provider} places nothing new (enabled = false)"
                )
                failed.append((a.id, AttemptEnd.LAUNCH_FAILED, why))
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
        # Each request is built before any transaction: a job whose stored spec no longer
        # validates fails its own attempt, with the reason, and holds up no other launch.
        built: dict[str, LaunchRequest] = {}
        memo = RequestMemo()
        # Placed beside a noticed attempt: no claim now (Handover writes it once that one is
        # done); the trainer is told how long to wait for it.
        deferred = [a.id for a, _, _ in ready if a.claim_pending]
        waits: dict[str, float] = {}
        if deferred:
            cfg = self._config()
            waits = {
                p.attempt_id: claim_wait(p, clouds, cfg, now)
                for p in read_pending(self.db, deferred)
            }
        for a, job, provider in ready:
            try:
                built[a.id] = self.requests.build(job, a, provider, memo, waits.get(a.id))
            except StoredSpecInvalid as e:
                failed.append((a.id, AttemptEnd.REJECTED, str(e)))
                out.append(LaunchOutcome(a.id, launched=False))
            except Exception as e:  # this job's request alone: never every launch
                log.exception("attempt %s: building its launch request failed", a.id)
                why = f"its launch request could not be built: {safe_message(e)}"
                failed.append((a.id, AttemptEnd.REJECTED, why))
                out.append(LaunchOutcome(a.id, launched=False))
        ready = [x for x in ready if x[0].id in built]
        # Re-checked now, before the claim: a store another job holds is never claimed.
        with self.db.read() as s:
            shared = store_use.launch_refusals(
                s, [(job.id, job.checkpoint_uri, job.spec_json) for _, job, _ in ready]
            )
        for a, job, _ in [x for x in ready if x[1].id in shared]:
            failed.append((a.id, AttemptEnd.FAILED, shared[job.id]))
            out.append(LaunchOutcome(a.id, launched=False))
        ready = [x for x in ready if x[1].id not in shared]
        claim_errors = claim_stores(self.stores, [x for x in ready if x[0].id not in waits])
        requests: dict[str, tuple[str, LaunchRequest]] = {}
        with self.db.write() as s:
            # In the session at once (and held: its identity map is weak), so each s.get below
            # is a lookup, not a query and an autoflush.
            held = load_by_id(s, Attempt, [x[0] for x in failed] + list(claim_errors))
            stamped = stamp_launch_requested(
                s, [a.id for a, _, _ in ready if a.id not in claim_errors], now
            )
            for attempt_id, end, why in failed:
                self.records.fail_in(s, attempt_id, end, why, now)
            for a, job, _provider in ready:
                err = claim_errors.get(a.id)
                if err is not None:
                    msg = f"cannot claim the checkpoint store: {err}"
                    if now - a.created_at > self._config().daemon.launch_timeout:
                        # The job's own store is unusable: this job's problem, not the pool's.
                        self.records.fail_in(s, a.id, AttemptEnd.REJECTED, msg, now)
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
                requests[a.id] = (a.provider, built[a.id])
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
        for aid, r in results.items():
            if isinstance(r.error, CallTimeout) and r.error.sent and r.error.future is not None:
                self._watch(aid, r.error.future)  # its answer is recorded when it lands
        with self.db.write() as s:
            now = self.clock.now()
            events: list[dict[str, Any]] = []
            recorded = record_launched(s, results, now, events)
            rest = [aid for aid in results if aid not in recorded]
            held = load_by_id(s, Attempt, rest)
            jobs = load_by_id(s, Job, [a.job_id for a in held.values()])
            known = nodes_of(s, rest)
            for attempt_id, r in results.items():
                done = recorded.get(attempt_id)
                if done is None:
                    done = self.records.record_in(
                        s, attempt_id, r.value, r.error, now, events, known
                    )
                out.append(done)
            emit_many(s, events)
            del held, jobs, known
        self.step("after_record")
        return out

    def hand_over(self) -> None:
        """Write the deferred store claims that are due (handover.Handover)."""
        self.handover.step()

    def adopt(self, attempt_ids: Sequence[str]) -> list[str]:
        """Attempts whose launch was asked for but never recorded: adopted by their token
        where found (adoption.Adoption). Returns the ids still without an instance."""
        return self.adoption.adopt(attempt_ids)


def _chunks(items: list[str], n: int) -> list[list[str]]:
    return [items[i : i + n] for i in range(0, len(items), n)]
