"""What the controllers share, passed to each explicitly: the database (short write
transactions), the clouds (concurrent calls with deadlines), the catalog, and small helpers.

The pattern every controller follows: read a snapshot and commit; call the clouds with a
deadline, outside any transaction; write the results in a short transaction that re-reads
the rows it changes. A slow cloud therefore never holds a database lock, and a CLI `submit`
never waits behind a terminate.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from providers.base import (
    Instance,
    LaunchRequest,
    Provider,
    ProviderError,
    ResourceRef,
    TaggedResource,
    TransientError,
)
from scheduler.core.catalog import Catalog
from scheduler.core.states import AttemptState, JobState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError

LIVE = (AttemptState.LAUNCHING, AttemptState.RUNNING, AttemptState.STOPPING)
# Rows whose writes (intents, waiting reasons, attempts seen running or ended) share one
# transaction: large enough that a pass costs few commits, small enough that the write lock
# is brief.
WRITE_BATCH = 500
ACTIVE_JOB_STATES = (
    JobState.PENDING,
    JobState.LAUNCHING,
    JobState.RUNNING,
    JobState.RECOVERING,
    JobState.HELD,
)
T = TypeVar("T")


class _CollectorPause:
    """Cyclic garbage collection held off while a pass works through thousands of rows.

    A pass allocates containers by the hundred thousand (rows, dicts, ORM objects); every
    700 start a collection, and every few of those walk the older generations, by then the
    whole heap: a 10,000-job launch pass spent over a second there and found next to
    nothing. Nothing is lost by waiting: reference counting frees acyclic garbage at once,
    and what is cyclic waits for the first collection after the pass, bounded by one
    pass's allocations. Counted under a lock, so overlapping passes (two threads, or a
    call inside a pass) resume collection only when the last one ends, and only if it
    was enabled when the first began; resumed on any exception too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._resume:
                    gc.enable()


collections_paused = _CollectorPause()


class Fence(Protocol):
    """The lease of a replicated daemon (scheduler.state.lease.Lease); None on SQLite."""

    def check(self, s: Session) -> None:
        """Inside the write transaction, before its writes: raise LeaseLost unless ours."""

    def guard(self) -> None:
        """Before a cloud call: raise LeaseLost unless the lease is (locally) still valid."""


class Db:
    """The engine plus the process's write lock: writes are short and serialised, so the
    accrue task and the reconcile pass never interleave inside one read-modify-write.

    With a fence (two replicas on PostgreSQL) every write transaction first proves, in that
    same transaction, that this daemon still holds the lease at its epoch: a stale holder's
    write raises LeaseLost and nothing of it is committed. Since every cloud call is preceded
    by such a write (the intent), a rejected intent means no cloud call."""

    def __init__(self, engine: Engine, fence: Fence | None = None) -> None:
        self.engine = engine
        self.fence = fence
        self._lock = threading.Lock()

    def read(self) -> Session:
        # Objects stay readable after commit: a pass reads them across short transactions.
        return Session(self.engine, expire_on_commit=False)

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._lock, Session(self.engine, expire_on_commit=False) as s:
            if self.fence is not None:
                self.fence.check(s)
            yield s
            s.commit()


class FencedStores(CheckpointStores):
    """Checkpoint stores whose writes (the owner claim made before a launch) need a valid
    lease: a stale holder must not hand a job's store back to an attempt it remembers."""

    def __init__(self, fence: Fence) -> None:
        super().__init__()
        self._fence = fence

    def guard(self) -> None:
        """Every write and every first claim (CheckpointStores calls it before either)."""
        try:
            self._fence.guard()
        except ProviderError as e:  # LeaseLost
            raise StoreError(str(e)) from None


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    catalog: Catalog = field(default_factory=Catalog.empty)
    provider_of_pool: Mapping[str, str] = field(default_factory=dict)
    # pool -> (the most instances its provider launches in one request, why), for providers
    # that launch fewer than the largest gang: placement skips them for bigger gangs.
    request_limit: Mapping[str, tuple[int, str]] = field(default_factory=dict)


class CatalogHolder:
    """The newest catalog and which provider sells each pool; swapped whole, never mutated,
    so a reader never sees one provider's new offerings with another's old owner map."""

    def __init__(self) -> None:
        self.current = CatalogSnapshot()

    @property
    def catalog(self) -> Catalog:
        return self.current.catalog

    @property
    def provider_of_pool(self) -> Mapping[str, str]:
        return self.current.provider_of_pool

    def set(
        self,
        catalog: Catalog,
        provider_of_pool: Mapping[str, str],
        request_limit: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        self.current = CatalogSnapshot(catalog, dict(provider_of_pool), dict(request_limit or {}))


class CallTimeout(TransientError):
    """A cloud call passed its deadline. `sent` is False when it never left the provider's
    queue (cancelled unsent: the cloud was never asked); otherwise it is still in flight
    and `future` will hold its late result (the launch records it: a launch that completes
    after its deadline must not leave an instance billed to nothing)."""

    def __init__(self, message: str, future: Future[Any] | None = None, sent: bool = True):
        super().__init__(message)
        self.future = future
        self.sent = sent


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    value: T | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Clouds:
    """The configured providers, each called on its own small thread pool with a deadline,
    so one slow cloud stalls neither the others nor the loop (nor the systemd watchdog)."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        timeout: timedelta,
        fence: Fence | None = None,
        observe_only: frozenset[str] = frozenset(),
    ) -> None:
        self.providers = dict(providers)
        # Providers that place nothing new (`enabled = false`): no offerings, no launches;
        # their live instances are still described, stopped, listed and billed.
        self.observe_only = observe_only
        self.timeout = timeout.total_seconds()
        self.fence = fence
        self._pools = {
            name: ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"cloud-{name}")
            for name in self.providers
        }

    def get(self, name: str) -> Provider | None:
        return self.providers.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.providers)

    def submit(self, name: str, fn: Callable[[Provider], T]) -> Future[T]:
        provider = self.providers[name]
        return self._pools[name].submit(fn, provider)

    def call(self, name: str, fn: Callable[[Provider], T]) -> T:
        """One call with the deadline; ProviderError (CallTimeout included) on failure."""
        result = self.gather({name: (name, fn)})[name]
        if result.error is not None:
            raise result.error
        return result.value  # type: ignore[return-value]

    def gather(
        self, calls: Mapping[str, tuple[str, Callable[[Provider], T]]]
    ) -> dict[str, Result[T]]:
        """Run calls concurrently (key -> (provider, fn)); each gets the deadline. A daemon
        whose lease is no longer valid makes none: each gets the LeaseLost error."""
        futures: dict[str, Future[T]] = {}
        out: dict[str, Result[T]] = {}
        if self.fence is not None and calls:
            try:
                self.fence.guard()
            except ProviderError as e:  # LeaseLost
                return {key: Result(error=e) for key in calls}
        for key, (name, fn) in calls.items():
            if name not in self.providers:
                out[key] = Result(error=ProviderError(f"provider {name} is not configured"))
                continue
            futures[key] = self.submit(name, self._fenced(fn))
        start = _monotonic()
        for key, fut in futures.items():
            left = max(0.0, self.timeout - (_monotonic() - start))
            try:
                out[key] = Result(value=fut.result(timeout=left))
            except FutureTimeout:
                if fut.cancel():  # still queued behind hung calls: never run it late
                    msg = f"{calls[key][0]}: not sent in {self.timeout:g}s (its calls were busy)"
                    out[key] = Result(error=CallTimeout(msg, fut, sent=False))
                else:
                    msg = f"{calls[key][0]}: no answer in {self.timeout:g}s"
                    out[key] = Result(error=CallTimeout(msg, fut, sent=True))
            except ProviderError as e:
                out[key] = Result(error=e)
            except Exception as e:  # an adapter bug must not take the daemon down
                out[key] = Result(error=e)
        return out

    def _fenced(self, fn: Callable[[Provider], T]) -> Callable[[Provider], T]:
        """The lease is checked again when the call leaves the queue: a call can wait up to
        the call deadline behind slow ones, longer than the lease may still be ours."""
        fence = self.fence
        if fence is None:
            return fn

        def call(provider: Provider) -> T:
            fence.guard()
            return fn(provider)

        return call

    def shutdown(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


# Placement rounds per pass: a capacity error sends the job to its next offering at once.
LAUNCH_ROUNDS = 4
# The cloud waits of one pass, each at most `call_timeout`: two stop steps, observe, the
# adoption of stale launches, up to LAUNCH_ROUNDS launch rounds, and the leak sweep's list
# and terminate. The progress reads have their own deadline.
PASS_CLOUD_WAITS = 2 + 1 + 1 + LAUNCH_ROUNDS + 2


def pass_bound(call_timeout: timedelta) -> float:
    """The longest a pass can take (real seconds) with every cloud at its deadline."""
    from scheduler.daemon.checkpoints import PROGRESS_READ_DEADLINE_S

    return PASS_CLOUD_WAITS * call_timeout.total_seconds() + PROGRESS_READ_DEADLINE_S + 30.0


# A provider that failed to describe its instances this many passes in a row is no longer
# waited for: its attempts accrue up to now again, so a hard budget holds while a cloud's
# API is down (and a refund follows if they had ended).
UNSEEN_PASSES = 3


class Observations:
    """When each provider last described its live instances: spend accrues a live attempt
    up to there, never past what anyone saw. Time nobody observed (the daemon down, one
    cloud's API failing) is billed once it is seen running, or up to the end the cloud
    reports: a restarted daemon never bills, stops or holds on spend that did not happen.
    The last observation is in the database (ProviderState), so it survives the restart it
    is for; failures in a row are counted in memory (a new daemon waits for its own)."""

    def __init__(self) -> None:
        self._failing: dict[str, int] = {}
        self._lock = threading.Lock()

    def failed(self, provider: str) -> None:
        with self._lock:
            self._failing[provider] = self._failing.get(provider, 0) + 1

    def record(self, s: Session, providers: list[str], at: datetime) -> None:
        """These providers described every live instance they hold as of `at`."""
        from scheduler.state.models import ProviderState

        with self._lock:
            for name in providers:
                self._failing.pop(name, None)
        for name in providers:
            row = s.get(ProviderState, name) or ProviderState(name=name)
            if row.observed_at is None or row.observed_at < at:
                row.observed_at = at
                s.add(row)

    def until(self, s: Session, now: datetime, lag: timedelta) -> dict[str, datetime]:
        """provider -> how far its live attempts may be accrued: now, when it was observed
        within `lag` (a pass's usual delay) or has failed UNSEEN_PASSES times in a row;
        else its last observation. A provider no daemon has described yet is absent (its
        attempts accrue up to now, as before this record existed)."""
        from scheduler.state.models import ProviderState

        out: dict[str, datetime] = {}
        for r in s.exec(select(ProviderState)).all():
            if r.observed_at is not None:
                out[r.name] = now if now - r.observed_at <= lag else r.observed_at
        with self._lock:
            for name, n in self._failing.items():
                if n >= UNSEEN_PASSES:
                    out[name] = now
        return out


class SaidOnce:
    """What a controller last said about each thing that keeps failing (a provider's
    listing or describe, an attempt's terminate): the event is written when the reason
    changes, not every pass (thousands a day per failing provider otherwise); a success
    forgets it, so the next failure is said again. In memory: a restarted daemon says each
    once more, which is the point of a new process's log."""

    def __init__(self) -> None:
        self._last: dict[str, str] = {}
        self._lock = threading.Lock()

    def first(self, key: str, message: str) -> bool:
        """Whether `message` is new for `key` (and remember it)."""
        with self._lock:
            if self._last.get(key) == message:
                return False
            self._last[key] = message
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)


def _monotonic() -> float:
    import time

    return time.monotonic()


def hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


def safe_message(e: BaseException) -> str:
    """One line for the audit log; providers guarantee no credentials in their messages."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:500]


def later(a: datetime | None, b: datetime) -> bool:
    return a is not None and a > b


def mark_unavailable(s: Session, pool: str, why: str, now: datetime, ttl: timedelta) -> None:
    """Keep a pool out of placement for `ttl` after a capacity, quota or provider error."""
    from scheduler.state.audit import emit
    from scheduler.state.models import PoolState

    ps = s.get(PoolState, pool) or PoolState(pool=pool)
    ps.unavailable_until = now + ttl
    ps.unavailable_reason = why[:300]
    s.add(ps)
    emit(s, now, "pool_unavailable", f"{pool} until {ps.unavailable_until:%H:%M:%S}Z: {why}")


def pool_up(s: Session, pool: str, now: datetime) -> None:
    """A launch runs in `pool`: see `pools_up`."""
    pools_up(s, [pool], now)


def pools_up(s: Session, pools: Iterable[str], now: datetime) -> None:
    """Launches run in `pools`: an outage that began with an interruption in one of them is
    over, and its length is kept (the pool's "avoid after interrupt" is learned from them).
    One query for the lot; pools with no open outage cost nothing more."""
    import json

    from sqlmodel import col, select

    from scheduler.core.hazard import MAX_OUTAGES
    from scheduler.state.models import PoolState

    wanted = sorted(set(pools))
    if not wanted:
        return
    for ps in s.exec(
        select(PoolState).where(
            col(PoolState.pool).in_(wanted), col(PoolState.outage_since).is_not(None)
        )
    ).all():
        assert ps.outage_since is not None
        if now > ps.outage_since:
            try:
                kept = [float(h) for h in json.loads(ps.outage_hours or "[]")]
            except (TypeError, ValueError):
                kept = []
            kept.append(round(hours(now - ps.outage_since), 4))
            ps.outage_hours = json.dumps(kept[-MAX_OUTAGES:])
        ps.outage_since = None
        s.add(ps)


def job_running(s: Session, job_id: str, pool: str, price: float, now: datetime) -> None:
    """The job's state follows its attempt once the cloud says the instance runs."""
    from scheduler.state.models import Job

    pool_up(s, pool, now)
    job = s.get(Job, job_id)
    if job is not None and job.state in (JobState.LAUNCHING, JobState.PENDING, JobState.RECOVERING):
        job.state, job.reason, job.updated_at = (
            JobState.RUNNING,
            f"on {pool} at ${price:.2f}/h",
            now,
        )
        job.not_before = None
        s.add(job)


# Typed closures for Clouds.gather: one cloud call each, bound to its arguments.
def describing(refs: list[ResourceRef]) -> Callable[[Provider], list[Instance]]:
    return lambda p: p.describe(refs)


def launching(request: LaunchRequest) -> Callable[[Provider], list[Instance]]:
    return lambda p: p.launch(request)


def terminating(refs: list[ResourceRef]) -> Callable[[Provider], None]:
    return lambda p: p.terminate(refs)


def finding(token: str, region: str) -> Callable[[Provider], list[Instance]]:
    return lambda p: p.find_by_token(token, region)


def listing(owner: str) -> Callable[[Provider], list[TaggedResource]]:
    return lambda p: p.list_tagged(owner)
