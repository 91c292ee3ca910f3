"""Deadline safety checks shared by the deadline-aware policies.

Slack is non-increasing: it only shrinks by waiting and by restart overheads, so "can we
still finish on on-demand after one more bad event?" is a sufficient guarantee.
"""

from __future__ import annotations

from .base import EPS, Observation


def can_wait(obs: Observation) -> bool:
    """Idle one more tick and still be able to launch on-demand at the next decision."""
    return obs.slack_if_launch - obs.tick_hours >= -EPS


def spot_is_safe(obs: Observation, zone: str) -> bool:
    """Running spot in `zone` leaves room for one interruption plus an on-demand launch."""
    keep = obs.on_spot == zone
    slack = obs.slack_if_keep if keep else obs.slack_if_launch
    return slack - obs.restart_overhead >= -EPS


def can_leave_on_demand(obs: Observation) -> bool:
    """Stopping on-demand now still leaves room to come back to it later."""
    return obs.slack_if_launch - obs.tick_hours >= -EPS
