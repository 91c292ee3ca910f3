"""The one policy interface shared by the daemon and the replay simulator.

A policy sees an `Observation` of one job at one decision point and answers an `Action`.
It does no I/O; it may keep learned state between calls (reset per job with `reset`).
Zones are plain strings (the daemon maps them to cloud pools); their number is not fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

EPS = 1e-9


class ActionKind(StrEnum):
    WAIT = "wait"
    ON_DEMAND = "on-demand"
    SPOT = "spot"


@dataclass(frozen=True, slots=True)
class Action:
    """What to run next: nothing, on-demand, or spot in `zone`."""

    kind: ActionKind
    zone: str | None = None

    def __post_init__(self) -> None:
        if (self.kind is ActionKind.SPOT) != (self.zone is not None):
            raise ValueError("a SPOT action needs a zone, and only a SPOT action has one")

    def __str__(self) -> str:
        return f"spot:{self.zone}" if self.kind is ActionKind.SPOT else self.kind.value


WAIT = Action(ActionKind.WAIT)
ON_DEMAND = Action(ActionKind.ON_DEMAND)


def SPOT(zone: str) -> Action:
    return Action(ActionKind.SPOT, zone)


@dataclass(frozen=True, slots=True)
class Observation:
    """One job at one decision point. Times and work are in hours, money in USD.

    `placement` is what is running now (None = nothing, e.g. just interrupted);
    `remaining_overhead` is the restart overhead the current attempt still has to pay.
    `tick_hours` is how long until the next decision (the caller's loop period).
    `migration_cost` is a one-off cost of launching in a zone (e.g. moving the checkpoint
    across regions); zones not listed cost nothing.
    Optional (defaults keep older callers valid): `spent` is the job's spend so far in USD
    (None: the policy keeps its own ledger), `checkpoint_interval` the hours of work between
    checkpoints (0 = checkpoint on the interruption notice) and `work_at_risk` the work done
    since the last checkpoint, lost if the current attempt is interrupted; `at_risk` the
    zones whose instances got an early signal now.
    """

    elapsed: float
    work_done: float
    work_total: float
    deadline: float
    restart_overhead: float
    remaining_overhead: float
    placement: Action | None
    spot_available: Mapping[str, bool]
    spot_price: Mapping[str, float]
    on_demand_price: float
    tick_hours: float
    migration_cost: Mapping[str, float] = field(default_factory=dict)
    spent: float | None = None
    checkpoint_interval: float = 0.0
    work_at_risk: float = 0.0
    # Zones whose running instances got an early interruption signal (a rebalance
    # recommendation) at this decision point.
    at_risk: frozenset[str] = frozenset()

    @property
    def remaining_work(self) -> float:
        return max(0.0, self.work_total - self.work_done)

    @property
    def time_left(self) -> float:
        return self.deadline - self.elapsed

    @property
    def slack_if_launch(self) -> float:
        """Hours to spare if a new attempt (paying the full restart overhead) started now."""
        return self.time_left - self.remaining_work - self.restart_overhead

    @property
    def slack_if_keep(self) -> float:
        """Hours to spare if the current attempt keeps running (idle: same as launching)."""
        if self.placement is None or self.placement.kind is ActionKind.WAIT:
            return self.slack_if_launch
        return self.time_left - self.remaining_work - self.remaining_overhead

    @property
    def expected_loss_per_interruption(self) -> float:
        """Hours one interruption costs: the restart overhead plus the work it throws away
        (half a checkpoint interval on average; nothing when checkpointing on notice)."""
        return self.restart_overhead + 0.5 * max(0.0, self.checkpoint_interval)

    def available_zones(self) -> list[str]:
        return [z for z, ok in self.spot_available.items() if ok]

    def cheapest_available(self) -> str | None:
        zones = self.available_zones()
        if not zones:
            return None
        return min(zones, key=lambda z: (self.spot_price.get(z, float("inf")), z))

    @property
    def on_spot(self) -> str | None:
        p = self.placement
        return p.zone if p is not None and p.kind is ActionKind.SPOT else None

    @property
    def on_demand(self) -> bool:
        return self.placement is not None and self.placement.kind is ActionKind.ON_DEMAND


class Policy:
    """Base class: subclasses implement `decide`; `observe` and `reset` are optional hooks."""

    name: ClassVar[str] = "base"

    def reset(self) -> None:
        """Forget per-job state (learned pool statistics may be kept)."""

    def observe(self, obs: Observation) -> None:
        """Learn from what was seen at this decision point (called before `decide`)."""

    def decide(self, obs: Observation) -> Action:
        raise NotImplementedError

    def wait_reason(self) -> str:
        """Why the last `decide` waited, in a few words for the operator's status line."""
        return "waiting for cheaper spot capacity"
