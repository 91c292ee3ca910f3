"""Reference policies: always on-demand, and greedy (spot when it can, else wait)."""

from __future__ import annotations

from .base import ON_DEMAND, SPOT, WAIT, Action, Observation, Policy
from .safety import can_wait, price_filtered, spot_is_safe


class OnDemandPolicy(Policy):
    """Always on-demand: the cost ceiling every score is measured against."""

    name = "on-demand"

    def decide(self, obs: Observation) -> Action:
        return ON_DEMAND


class GreedyPolicy(Policy):
    """Spot whenever available, else wait; on-demand (for good) once slack runs out.

    Slack "runs out" when waiting one more tick would no longer leave time for the remaining
    work plus one restart on on-demand. A zone priced out (safety.price_ok) counts as down.
    """

    name = "greedy"

    def decide(self, obs: Observation) -> Action:
        obs = price_filtered(obs)  # a priced-out zone counts as unavailable
        if obs.on_demand:
            return ON_DEMAND
        cur = obs.on_spot
        if cur is not None and obs.spot_available.get(cur, False):
            if spot_is_safe(obs, cur) or obs.slack_if_launch < 0:
                return SPOT(cur)
            return ON_DEMAND
        zone = self.choose_zone(obs)
        if zone is not None and spot_is_safe(obs, zone):
            return SPOT(zone)
        if not can_wait(obs) or zone is not None:
            return ON_DEMAND
        return WAIT

    def choose_zone(self, obs: Observation) -> str | None:
        """The spot zone to launch in when not on spot: the cheapest available."""
        return obs.cheapest_available()
