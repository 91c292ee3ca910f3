"""Time as a dependency: the daemon, the local market and replay all read it from a Clock."""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    speedup = 1.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class SimClock:
    """A clock that only moves when told to (tests, replay). sleep() advances it instantly."""

    speedup = 1.0

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)


def utcnow() -> datetime:
    return datetime.now(UTC)


class ScaledClock:
    """Real time sped up around an anchor: the local market's world, where trace hours pass in
    real seconds, so prices, spend, budgets and deadlines all move at the market's speed."""

    # A sped-up clock must keep working for this much real time (datetime ends at 9999).
    HORIZON = timedelta(days=365)

    def __init__(self, anchor: datetime, speedup: float) -> None:
        if not (math.isfinite(speedup) and speedup > 0):
            raise ValueError(f"speedup {speedup!r} must be a finite number above 0")
        try:
            anchor + self.HORIZON * speedup
        except OverflowError:
            raise ValueError(
                f"speedup {speedup:g} is too large: market time would pass the year 9999 "
                "within a year"
            ) from None
        self.anchor = anchor
        self.speedup = speedup

    def now(self) -> datetime:
        return self.anchor + (datetime.now(UTC) - self.anchor) * self.speedup

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds / self.speedup)


class ForwardClock:
    """A clock that never reads earlier than it did (nor than `floor`): the daemon's clock.

    A wall clock can step back (NTP, a VM resumed from a snapshot); billing, budget windows
    and back-offs must not. While the clock underneath is behind, time stands still at the
    latest reading until it catches up."""

    def __init__(self, inner: Clock, floor: datetime | None = None) -> None:
        self.inner = inner
        self._latest = floor
        self._lock = threading.Lock()

    @property
    def speedup(self) -> float:
        return float(getattr(self.inner, "speedup", 1.0) or 1.0)

    def now(self) -> datetime:
        t = self.inner.now()
        with self._lock:
            if self._latest is not None and t < self._latest:
                return self._latest
            self._latest = t
            return t

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)
