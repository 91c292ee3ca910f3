"""Deadline, price and regret guards shared by the deadline-aware policies.

Slack is non-increasing: it only shrinks by waiting and by restart overheads, so "can we
still finish on on-demand after one more bad event?" is a sufficient guarantee.

Prices (hysteresis, so a price hovering near on-demand does not make a job flap): a spot
attempt is left once its price passes PRICE_LEAVE x on-demand; a new one starts only at or
below PRICE_ENTER x on-demand.

Regret (in the spirit of ROSS's hedge): "regret" is what the job would cost above running
all-on-demand if it went to on-demand for good now. `hedge_allows_spot` refuses any spot
tick whose worst case (billed through the tick or the launch overhead, then interrupted
with only what the checkpoints kept) could push that past HEDGE_MARGIN x the all-on-demand
cost, so a job that follows it never costs more than (1 + HEDGE_MARGIN) x all-on-demand,
whatever the trace.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .base import EPS, Observation

# A running spot attempt is left once its price passes this x on-demand ...
PRICE_LEAVE = 1.0
# ... and a new one starts only at or below this x on-demand: the gap is the hysteresis.
PRICE_ENTER = 0.9
# The regret hedge's bound, the product's promise (at most 1.05x all-on-demand), not a
# tuning knob: docs/designs/deadline-policy-tuning-history.md#hedge_margin
HEDGE_MARGIN = 0.05


def can_wait(obs: Observation) -> bool:
    """Idle one more tick and still be able to launch on-demand at the next decision."""
    return obs.slack_if_launch - obs.tick_hours >= -EPS


def spot_is_safe(obs: Observation, zone: str) -> bool:
    """Running spot in `zone` leaves room for one interruption (and the work it throws
    away) plus an on-demand launch."""
    keep = obs.on_spot == zone
    slack = obs.slack_if_keep if keep else obs.slack_if_launch
    lost = 0.0
    if obs.checkpoint_interval > 0:  # this tick's progress, and any since the checkpoint:
        # a new launch loses it too (on-demand work since the checkpoint dies with the spot
        # attempt that continues from it)
        lost = obs.tick_hours + obs.work_at_risk
    return slack - obs.restart_overhead - lost >= -EPS


def can_leave_on_demand(obs: Observation) -> bool:
    """Stopping on-demand now still leaves room to come back to it later."""
    return obs.slack_if_launch - obs.tick_hours >= -EPS


# ---- prices ------------------------------------------------------------------------------


def price_ok(obs: Observation, zone: str) -> bool:
    """Spot in `zone` is not priced out (looser for the attempt already running there)."""
    limit = PRICE_LEAVE if obs.on_spot == zone else PRICE_ENTER
    return obs.spot_price.get(zone, float("inf")) <= limit * obs.on_demand_price + EPS


def price_filtered(obs: Observation) -> Observation:
    """`obs` with priced-out zones shown as unavailable (unchanged when none is)."""
    avail = obs.spot_available
    if all(not ok or price_ok(obs, z) for z, ok in avail.items()):
        return obs
    return replace(obs, spot_available={z: ok and price_ok(obs, z) for z, ok in avail.items()})


# ---- regret against all-on-demand --------------------------------------------------------


def all_on_demand_cost(obs: Observation) -> float:
    return obs.on_demand_price * (obs.work_total + obs.restart_overhead)


def regret_if_committed(obs: Observation, spent: float) -> float:
    """USD above all-on-demand if the job ran on-demand from now to the end."""
    oh = obs.remaining_overhead if obs.on_demand else obs.restart_overhead
    finish = obs.on_demand_price * (obs.remaining_work + oh)
    return spent + finish - all_on_demand_cost(obs)


def hedge_margin(obs: Observation) -> float:
    return HEDGE_MARGIN * all_on_demand_cost(obs)


def hedge_allows_spot(obs: Observation, zone: str, spent: float) -> bool:
    """Spot in `zone` cannot, at worst, push regret past the margin before it does work.

    Worst case: the attempt is interrupted at the worst moment of its next stretch (this
    tick, or all of its launch overhead if that is longer), billed up to then with the work
    since the last checkpoint lost, and the job then goes on-demand paying a fresh restart.
    Looking over the whole overhead means a launch is refused up front rather than cut off
    halfway, its overhead wasted. With a checkpoint on the notice, work done after the
    overhead is kept, so a running attempt past its overhead, at a price below on-demand,
    only lowers the worst case.
    """
    od = obs.on_demand_price
    price = obs.spot_price.get(zone, float("inf"))
    if not math.isfinite(price):
        return False
    keep = obs.on_spot == zone
    overhead = obs.remaining_overhead if keep else obs.restart_overhead
    end = max(obs.tick_hours, overhead)
    rem = obs.remaining_work
    if obs.checkpoint_interval > 0:  # periodic checkpoints: count none of it as kept
        lost, points = obs.work_at_risk, [(end, 0.0)]
    else:  # (hours billed, hours of work kept): the worst case lies on a breakpoint; billing
        # stops when the work is done, so the stretch ends there at the latest
        done = min(end - overhead, rem)
        lost, points = 0.0, [(overhead, 0.0), (overhead + done, done)]
    billed = max(price * t - od * kept for t, kept in points)
    if not keep:
        billed += obs.migration_cost.get(zone, 0.0)
    finish = od * (rem + lost + obs.restart_overhead)
    worst = spent + billed + finish - all_on_demand_cost(obs)
    return worst <= hedge_margin(obs) + EPS


def hedge_allows_idle(obs: Observation, spent: float) -> bool:
    """Stopping (or staying stopped) keeps regret within the margin."""
    od = obs.on_demand_price
    worst = spent + od * (obs.remaining_work + obs.restart_overhead) - all_on_demand_cost(obs)
    return worst <= hedge_margin(obs) + EPS
