"""Uniform Progress, from "Can't Be Late" (Wu et al., NSDI'24).

Keep progress on or above the line work_total * t / deadline. Behind the line: spot if any
zone has it, else on-demand. Ahead: spot or wait. Hysteresis: once on on-demand, go back to
spot only when ahead of the line shifted by two restart overheads. Safety net: with less than
two restart overheads of slack (rounded up to whole ticks), stay on / go to on-demand.
One addition for live prices: a zone priced out (safety.price_ok, with hysteresis) counts as
unavailable, so a running attempt leaves a spot price that passed on-demand.
"""

from __future__ import annotations

import math

from .base import EPS, ON_DEMAND, SPOT, WAIT, Action, Observation, Policy
from .safety import price_filtered


class UniformProgressPolicy(Policy):
    name = "uniform-progress"

    def decide(self, obs: Observation) -> Action:
        obs = price_filtered(obs)  # a priced-out zone counts as unavailable
        c0, d, t, g = obs.work_total, obs.deadline, obs.elapsed, obs.tick_hours
        o = obs.restart_overhead
        done = obs.work_done
        cur = obs.on_spot
        if cur is not None and obs.spot_available.get(cur, False):
            zone: str | None = cur
        else:
            zone = obs.cheapest_available()
        has_spot = zone is not None

        behind = done - t * c0 / d < -EPS
        # On on-demand, leave only when ahead of the line shifted by 2 restart overheads.
        not_ahead_2d = (t + 2 * o) * c0 / d - done >= -EPS

        want_spot = has_spot
        want_od = behind and not has_spot
        if obs.on_demand and (not has_spot or not_ahead_2d):
            want_spot, want_od = False, True

        remaining_time = math.floor((obs.time_left + EPS) / g) * g
        w = obs.remaining_work
        need_1d = math.ceil((w + o) / g - EPS) * g
        need_2d = math.ceil((w + 2 * o) / g - EPS) * g
        if need_2d > remaining_time + EPS and cur is None:
            want_spot, want_od = False, True
        if need_1d >= remaining_time - EPS:
            keep_spot = cur is not None and has_spot and obs.remaining_overhead < 1e-3
            want_spot, want_od = keep_spot, not keep_spot

        if want_od:
            return ON_DEMAND
        if want_spot and zone is not None:
            return SPOT(zone)
        return WAIT
