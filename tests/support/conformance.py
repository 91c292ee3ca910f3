"""Harnesses for the provider conformance suite: one per adapter, the same questions for all.

A harness knows how to build a launchable request for its provider, how to make a launch
fail for capacity, and how to wait for the cloud's eventual consistency; the tests in
test_conformance.py ask every provider the same things through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    Instance,
    InstanceState,
    LaunchRequest,
    Offering,
    Provider,
    ResourceRef,
)

OWNER = "conformance"


@dataclass
class Harness:
    provider: Provider
    offering: Offering  # one launchable offering
    command: list[str] = field(default_factory=lambda: ["sleep", "300"])
    # Make the next launch into `offering`'s pool fail for capacity (now or in describe).
    inject_capacity: Callable[[], None] | None = None
    # Let the pool take only this many more nodes (a gang's launch then falls short there).
    inject_gang_capacity: Callable[[int], None] | None = None
    # Advance the provider's notion of time (fakes) or wait for real (clouds, processes).
    wait: Callable[[float], None] = time.sleep
    # A ref the cloud has never seen, in a place the provider can look.
    unknown_ref: ResourceRef | None = None
    # Seconds (of `wait`) within which a launched instance must become visible.
    visible_within: float = 30.0
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def request(self, token: str, **changes: object) -> LaunchRequest:
        fields: dict[str, object] = {
            "token": token,
            "offering": self.offering,
            "command": self.command,
            "env": {"SPOTWISE_JOB_ID": "j-conf"},
            "tags": {TAG_JOB: "j-conf", TAG_ATTEMPT: f"j-conf-{token}", TAG_OWNER: OWNER},
        }
        fields.update(changes)
        return LaunchRequest(**fields)  # type: ignore[arg-type]

    def until(
        self, refs: list[ResourceRef], done: Callable[[Instance], bool], within: float = 30.0
    ) -> list[Instance]:
        """describe() until every instance satisfies `done`, stepping `wait`."""
        deadline = time.monotonic() + max(within, 5.0) * 4  # real-time bound for fakes too
        step, waited = 0.2, 0.0
        while True:
            seen = self.provider.describe(refs)
            if all(done(i) for i in seen) or waited >= within or time.monotonic() > deadline:
                return seen
            self.wait(step)
            waited += step

    def visible(self, refs: list[ResourceRef]) -> list[Instance]:
        return self.until(
            refs, lambda i: i.state is not InstanceState.NOT_FOUND, self.visible_within
        )

    def ended(self, refs: list[ResourceRef], within: float = 60.0) -> list[Instance]:
        return self.until(refs, lambda i: i.state is InstanceState.ENDED, within)


class StepClock:
    """A clock for fakes that moves only when the harness waits."""

    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)
