"""Deadline policies: one interface (`Policy.decide(Observation) -> Action`) for the daemon
and the replay simulator, and a registry by name."""

from __future__ import annotations

from collections.abc import Callable

from .base import ON_DEMAND, SPOT, WAIT, Action, ActionKind, Observation, Policy
from .basic import GreedyPolicy, OnDemandPolicy
from .optimal import OptimalPolicy
from .spotwise import SpotwisePolicy
from .uniform_progress import UniformProgressPolicy

_REGISTRY: dict[str, Callable[[], Policy]] = {
    "on-demand": OnDemandPolicy,
    "greedy": GreedyPolicy,
    "uniform-progress": UniformProgressPolicy,
    "optimal": OptimalPolicy,
    "spotwise": SpotwisePolicy,
}
POLICY_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def get_policy(name: str) -> Policy:
    """A fresh policy instance by name (one per job: policies keep per-job state)."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}"
        ) from None


__all__ = [
    "ON_DEMAND",
    "POLICY_NAMES",
    "SPOT",
    "WAIT",
    "Action",
    "ActionKind",
    "Observation",
    "Policy",
    "get_policy",
]
