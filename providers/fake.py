"""FakeCloud: an in-memory Provider with fault injection, for tests and `spotwise bench daemon`.

It behaves like a cloud where it matters to the scheduler: launches are idempotent on the
token, instances may stay invisible to describe() for a while after launch (eventual
consistency), launches may complete later with a capacity error, terminations may take time,
and any call can be made to fail (Throttled / TransientError) or to stall, at a seeded rate.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from providers.adapter import EventQueue, UtcClock
from providers.base import (
    TAG_OWNER,
    Capabilities,
    EndReason,
    FailureKind,
    Instance,
    InstanceState,
    LaunchFailure,
    LaunchRequest,
    Offering,
    ProviderError,
    ProviderEvent,
    ResourceRef,
    RiskSignal,
    TaggedResource,
    Throttled,
    TransientError,
    not_found,
)


@dataclass(slots=True)
class Faults:
    """Seeded fault injection: `rate` of calls to the named methods raise; `stall_s` of real
    time is spent in each call (a slow cloud); `errors` pick what is raised."""

    rate: float = 0.0
    methods: frozenset[str] = frozenset(
        {"offerings", "launch", "describe", "terminate", "list_tagged", "find_by_token"}
    )
    stall_s: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    injected: int = 0
    calls: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def before(self, method: str) -> None:
        self.calls += 1
        stall = self.stall_s.get(method, 0.0)
        if stall:
            time.sleep(stall)
        if self.rate and method in self.methods and self._rng.random() < self.rate:
            self.injected += 1
            cls = Throttled if self._rng.random() < 0.5 else TransientError
            raise cls(f"fake: injected {cls.__name__} in {method}")


class FakeCloud:
    """One fake cloud account. `clock` is anything with now(); times are on that clock."""

    def __init__(
        self,
        offerings: Sequence[Offering] = (),
        *,
        name: str = "fake",
        clock: object | None = None,
        visibility_delay: timedelta = timedelta(0),
        faults: Faults | None = None,
        start_running: bool = False,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            visibility_delay=visibility_delay,
            launch_completes_later=True,
            max_count=64,
            placement_groups=True,
            idempotency_window=None,
        )
        self._offerings = list(offerings)
        self.clock = clock or UtcClock()
        # True: launch() answers RUNNING at once (a fast cloud, like the local market);
        # False: PENDING, with the outcome arriving through describe() (GCE, Azure).
        self.start_running = start_running
        self.faults = faults or Faults()
        self._lock = threading.RLock()
        self._risk: list[RiskSignal] = []  # the cloud's risk data (none unless set)
        self.risk_calls = 0
        self._ids = itertools.count(1)
        self.instances: dict[str, Instance] = {}
        self._visible_at: dict[str, datetime] = {}
        self._tokens: dict[str, list[str]] = {}
        self._events = EventQueue(maxlen=None)
        # pool -> failure delivered by describe after launch (GCE/Azure style) ...
        self.fail_later: dict[str, LaunchFailure] = {}
        # ... or raised by launch itself.
        self.fail_launch: dict[str, ProviderError] = {}
        # How long (clock time) a terminate takes to end an instance.
        self.terminate_delay = timedelta(0)
        self._ending: dict[str, datetime] = {}
        self.launch_calls = 0
        self.terminate_calls = 0
        self.last_request: LaunchRequest | None = None
        self.on_launch: Callable[[LaunchRequest, list[Instance]], None] | None = None

    def _now(self) -> datetime:
        return self.clock.now()  # type: ignore[attr-defined]

    # -- Provider ------------------------------------------------------------------------
    def offerings(self) -> list[Offering]:
        self.faults.before("offerings")
        now = self._now()
        with self._lock:
            return [replace(o, seen_at=now) for o in self._offerings]

    def launch(self, request: LaunchRequest) -> list[Instance]:
        self.faults.before("launch")
        with self._lock:
            self.launch_calls += 1
            self.last_request = request
            known = self._tokens.get(request.token)
            if known is not None:
                return [self._view(self.instances[i]) for i in known]
            o = request.offering
            err = self.fail_launch.get(o.pool)
            if err is not None:
                raise err
            now = self._now()
            out = []
            for node in range(request.count):
                inst = Instance(
                    id=f"{self.name}-{next(self._ids):06d}",
                    cloud=o.cloud,
                    region=o.region,
                    zone=o.zone,
                    instance_type=o.instance_type,
                    market=o.market,
                    state=InstanceState.PENDING,
                    tags=dict(request.tags),
                    launched_at=now,
                    node=request.node_of(node),
                )
                self.instances[inst.id] = inst
                self._visible_at[inst.id] = now + self.capabilities.visibility_delay
                out.append(inst)
            self._tokens[request.token] = [i.id for i in out]
            failure = self.fail_later.get(o.pool)
            for inst in out:
                if failure is not None:
                    inst.failure = failure
                else:
                    inst.state = InstanceState.RUNNING
            if self.on_launch is not None:
                self.on_launch(request, out)
            if self.start_running and failure is None:
                return [self._view(i) for i in out]
            return [replace(i, state=InstanceState.PENDING, failure=None) for i in out]

    def _view(self, inst: Instance) -> Instance:
        """What describe shows now: failures land as ENDED/LAUNCH_FAILED, terminations end
        after `terminate_delay`."""
        now = self._now()
        ending = self._ending.get(inst.id)
        if ending is not None and now >= ending and inst.state is not InstanceState.ENDED:
            self._end(inst, EndReason.TERMINATED, None, ending)
        if inst.failure is not None and inst.state is not InstanceState.ENDED:
            self._end(inst, EndReason.LAUNCH_FAILED, None, now)
        return replace(inst, tags=dict(inst.tags))

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        self.faults.before("describe")
        now = self._now()
        with self._lock:
            out = []
            for ref in refs:
                inst = self.instances.get(ref.id)
                if inst is None or now < self._visible_at.get(ref.id, now):
                    out.append(not_found(ref, self.name))
                else:
                    out.append(self._view(inst))
            return out

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        self.faults.before("terminate")
        now = self._now()
        with self._lock:
            self.terminate_calls += 1
            for ref in refs:
                inst = self.instances.get(ref.id)
                if inst is None or inst.state is InstanceState.ENDED:
                    continue
                self._ending.setdefault(ref.id, now + self.terminate_delay)
                self._view(inst)

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        self.faults.before("list_tagged")
        now = self._now()
        with self._lock:
            out = []
            for inst in self.instances.values():
                if inst.tags.get(TAG_OWNER) != owner or now < self._visible_at[inst.id]:
                    continue
                view = self._view(inst)
                out.append(TaggedResource(view.ref, dict(view.tags), view.live, view.launched_at))
            return out

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        self.faults.before("find_by_token")
        with self._lock:
            return [self._view(self.instances[i]) for i in self._tokens.get(token, [])]

    def drain_events(self) -> list[ProviderEvent]:
        return self._events.drain()

    # -- test and bench controls ---------------------------------------------------------
    def _end(self, inst: Instance, reason: EndReason, exit_code: int | None, at: datetime) -> None:
        inst.state, inst.end_reason, inst.exit_code = InstanceState.ENDED, reason, exit_code
        inst.ended_at = at
        inst.notice_at = None
        inst.early_signal_at = None

    def end(self, instance_id: str, reason: EndReason, exit_code: int | None = None) -> None:
        with self._lock:
            self._end(self.instances[instance_id], reason, exit_code, self._now())

    def notice(self, instance_id: str) -> None:
        """The cloud announces an interruption (the instance keeps running for now)."""
        with self._lock:
            self.instances[instance_id].notice_at = self._now()

    def risk_signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        """The risk data set with `set_risk`, for the pools among `offerings`."""
        pools = {o.pool for o in offerings}
        with self._lock:
            self.risk_calls += 1
            return [r for r in self._risk if r.pool in pools]

    def set_risk(self, signals: Sequence[RiskSignal]) -> None:
        with self._lock:
            self._risk = list(signals)

    def early_signal(self, instance_id: str) -> None:
        """The cloud sees the instance at elevated risk (a rebalance recommendation)."""
        with self._lock:
            self.instances[instance_id].early_signal_at = self._now()

    def set_offerings(self, offerings: Sequence[Offering]) -> None:
        with self._lock:
            self._offerings = list(offerings)

    def emit(self, message: str) -> None:
        self._events.put(ProviderEvent(message))

    def running(self) -> list[Instance]:
        with self._lock:
            views = [self._view(i) for i in self.instances.values()]
            return [v for v in views if v.live]

    @staticmethod
    def capacity_failure(pool: str) -> LaunchFailure:
        return LaunchFailure(FailureKind.CAPACITY, f"fake: no capacity in {pool}", pool)
