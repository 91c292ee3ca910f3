"""The skeleton every cloud adapter shares, written once: the Provider facade's forwards to
the resource modules, and the plumbing each cloud's api.py needs besides its SDK.

A cloud adapter is a thin composition, Karpenter-style: an `Api` (the SDK's clients, typed
error translation) and one module per resource (offerings, instances, network...). This
module holds what is the same in every cloud, so `providers/<cloud>/provider.py` only builds
its resource modules and states its `Capabilities`:

- `CloudAdapter`: the Provider methods, each forwarded to the resource module that owns it;
- `CloudApi`: the clock, the lock and the event queue every `Api` extends; events are masked
  (providers/masking.py) and logged as they are emitted, and wait for `drain_events()`;
- `EventQueue` and `UtcClock`: the queue of ProviderEvents and the default clock, which the
  local market and FakeCloud use too.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from providers.base import (
    Capabilities,
    Instance,
    LaunchRequest,
    Offering,
    ProviderEvent,
    ResourceRef,
    TaggedResource,
)
from providers.masking import mask_message

# Events a daemon that stopped draining can leave behind; the oldest are dropped first.
EVENT_BACKLOG = 1000


class Clock(Protocol):
    """Anything with now() (scheduler.core.clock.Clock fits); providers do not import scheduler."""

    def now(self) -> datetime: ...


class UtcClock:
    """The clock when none is given: real time, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class EventQueue:
    """ProviderEvents waiting for the daemon's next drain_events(); safe across threads."""

    def __init__(self, maxlen: int | None = EVENT_BACKLOG) -> None:
        self._lock = threading.Lock()
        self._events: deque[ProviderEvent] = deque(maxlen=maxlen)

    def put(self, event: ProviderEvent) -> None:
        with self._lock:
            self._events.append(event)

    def drain(self) -> list[ProviderEvent]:
        """Everything queued since the last drain, oldest first; the queue is left empty."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
            return out


class CloudApi:
    """What every cloud's Api shares: the clock, a lock for its clients, and the events."""

    def __init__(self, clock: Clock | None, log: logging.Logger) -> None:
        self._clock: Clock = clock if clock is not None else UtcClock()
        self._lock = threading.RLock()
        self._log = log
        self._events = EventQueue()

    def now(self) -> datetime:
        return self._clock.now()

    def secrets(self) -> list[str]:
        """Values that must never appear in a message (the session's current tokens)."""
        return []

    def emit(self, message: str, level: str = "warning") -> None:
        """Record something the daemon should log (a price fallback, a skipped region)."""
        message = mask_message(message, self.secrets())
        self._log.warning("%s", message)
        self._events.put(ProviderEvent(message, level))

    def drain_events(self) -> list[ProviderEvent]:
        return self._events.drain()


class OfferingsModule(Protocol):
    """A cloud's offerings.py: everything buyable now, with current prices."""

    def all(self) -> list[Offering]: ...


class InstancesModule(Protocol):
    """A cloud's instances.py: launch, observe, terminate and find instances."""

    def launch(self, request: LaunchRequest) -> list[Instance]: ...
    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]: ...
    def terminate(self, refs: Sequence[ResourceRef]) -> None: ...
    def list_tagged(self, owner: str) -> list[TaggedResource]: ...
    def find_by_token(self, token: str, region: str = "") -> list[Instance]: ...


class CloudAdapter:
    """The Provider protocol (providers/base.py) over one cloud's resource modules. It makes
    no decisions and keeps nothing a restart could lose: each method forwards to the module
    that owns the resource. Subclasses set `name` and `capabilities` and build the modules."""

    name: str
    capabilities: Capabilities

    def __init__(
        self, api: CloudApi, offerings: OfferingsModule, instances: InstancesModule
    ) -> None:
        self._api = api
        self._offerings = offerings
        self._instances = instances

    def offerings(self) -> list[Offering]:
        return self._offerings.all()

    def launch(self, request: LaunchRequest) -> list[Instance]:
        return self._instances.launch(request)

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        return self._instances.describe(refs)

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        self._instances.terminate(refs)

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        return self._instances.list_tagged(owner)

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        return self._instances.find_by_token(token, region)

    def drain_events(self) -> list[ProviderEvent]:
        return self._api.drain_events()
