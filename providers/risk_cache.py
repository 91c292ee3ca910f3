"""The clouds' risk answers, each kept for its TTL and asked for a bounded number at a time.

Every cloud's risk API (AWS placement scores, GCE capacity advice and history, Azure Spot
placement scores and Resource Graph's eviction-rate bands) is rate-limited and slow to
change, so each reader keeps what it was told per key (a
region, a zone and shape, a location and size) for the cloud's RISK_REFRESH and asks at most
RISK_CALLS_PER_POLL new keys per price poll. A failed or refused ask is said once and kept as
"no answer" for the TTL too: the pools keep the configured prior and the API is not hammered.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from datetime import datetime, timedelta
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RiskAnswers(Generic[K, V]):
    def __init__(
        self,
        ttl: timedelta,
        per_poll: int,
        now: Callable[[], datetime],
        emit: Callable[[str], None],
    ) -> None:
        self._ttl = ttl
        self._per_poll = per_poll
        self._now = now
        self._emit = emit
        self._answers: dict[K, tuple[datetime, V | None]] = {}

    def refresh(
        self,
        keys: Iterable[K],
        ask: Callable[[K], V],
        failed: Callable[[K, Exception], str],
    ) -> None:
        """Ask about each key (in order) with no answer younger than the TTL, at most
        `per_poll` of them; a failure is emitted as `failed(key, exc)` says it (an empty
        text: one already said, e.g. a refusal that covers the key)."""
        now = self._now()
        asked = 0
        for key in keys:
            hit = self._answers.get(key)
            if hit is not None and now - hit[0] < self._ttl:
                continue
            if asked >= self._per_poll:
                break
            asked += 1
            try:
                value: V | None = ask(key)
            except Exception as exc:  # the SDK's own errors: the pools keep their prior
                said = failed(key, exc)
                if said:
                    self._emit(said)
                value = None
            self._answers[key] = (now, value)

    def get(self, key: K) -> V | None:
        """The last answer about `key` (however old), None when there is none."""
        hit = self._answers.get(key)
        return None if hit is None else hit[1]
