"""Act on an early interruption signal only when moving costs no more than waiting would.

An AWS rebalance recommendation says the instance is at elevated risk, often minutes before
the two-minute notice, but not every recommendation is followed by an interruption. On the
signal the trainer saves at once (nothing to redo from there), and the daemon may move the
job before the notice. Both choices are priced with the daemon's own cost model:

- move now: the old instance bills while it checkpoints and stops, the new one pays the
  restart overhead, then the rest of the work at the new pool's expected rate;
- wait: with probability `p` the pool takes the instance back within the signal's horizon:
  the job then moves anyway (the same move cost) and also redoes the work done between the
  signal and the notice (`lead_hours`, lost since the early save); otherwise it finishes here.

The daemon moves only when `go <= stay`: never more in expectation than waiting. A cheaper or
equal pool and a likely interruption make the move pay; an expensive alternative or an
unlikely interruption keep the job where it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from scheduler.core.policy.base import ON_DEMAND, SPOT, Action, ActionKind, Observation, Policy
from scheduler.core.price_moves import Alternative, Move, MoveCosts, Running, move_cost

# How long a rebalance recommendation raises its pool's hazard: AWS sends it "often minutes"
# before the notice; past two hours without a notice the pool is judged on its history again.
SIGNAL_HORIZON_HOURS = 2.0


@dataclass(frozen=True, slots=True)
class Signal:
    """What the daemon knows of one early signal."""

    interrupt_probability: float  # that the instance is taken back within the horizon
    lead_hours: float  # expected hours from the signal to the notice


def interrupt_probability(hazard_per_hour: float, horizon_hours: float) -> float:
    """The chance of at least one interruption in `horizon_hours` at a constant hazard."""
    return 1.0 - math.exp(-max(0.0, hazard_per_hour) * max(0.0, horizon_hours))


def costs(
    cur: Running, alt: Alternative, remaining_hours: float, mc: MoveCosts, signal: Signal
) -> tuple[float, float]:
    """(expected $ to finish if the job waits, if it moves now)."""
    p = min(1.0, max(0.0, signal.interrupt_probability))
    just_saved = MoveCosts(mc.restart_overhead_hours, mc.checkpoint_hours, 0.0, mc.migration_usd)
    go = alt.rate * remaining_hours + move_cost(cur, alt, just_saved)
    redo = signal.lead_hours * (cur.price + alt.rate)  # paid once here, again there
    taken = alt.rate * remaining_hours + move_cost(cur, alt, just_saved) + redo
    stay = (1.0 - p) * cur.rate * remaining_hours + p * taken
    return stay, go


def decide(
    cur: Running,
    alt: Alternative | None,
    remaining_hours: float,
    mc: MoveCosts,
    signal: Signal,
) -> Move | None:
    """The move to make on the signal, or None to wait for the notice (or none)."""
    if alt is None or alt.pool == cur.pool or remaining_hours <= 0:
        return None
    stay, go = costs(cur, alt, remaining_hours, mc, signal)
    if go > stay:
        return None
    return Move(
        f"rebalance recommended: moving now to {alt.pool} costs ${go:.2f} to finish, "
        f"waiting ${stay:.2f} in expectation",
        cur.price,
        alt.price,
        stay - go,
    )


class EarlyMoves(Policy):
    """Wraps a policy: on an early signal for the zone the job runs in, moves now where
    `decide` says it pays (to the cheapest other available zone, else on-demand), and keeps
    the inner policy out of that zone for the signal's horizon; otherwise the inner policy
    decides. Used by the replay; the daemon asks `decide` directly."""

    name: ClassVar[str] = "early-moves"

    def __init__(
        self,
        inner: Policy,
        signal: Signal,
        hazard_per_hour: float = 0.1,
        horizon_hours: float = SIGNAL_HORIZON_HOURS,
    ) -> None:
        self.inner = inner
        self.signal = signal
        self.hazard = hazard_per_hour
        self.horizon = horizon_hours
        self.moves = 0
        self.waits = 0
        self._avoid: dict[str, float] = {}  # zone -> until (elapsed hours)

    def reset(self) -> None:
        self.inner.reset()
        self.moves = self.waits = 0
        self._avoid.clear()

    def observe(self, obs: Observation) -> None:
        self.inner.observe(obs)

    def _rate(self, price: float, obs: Observation) -> float:
        return price * (1.0 + self.hazard * obs.expected_loss_per_interruption)

    def _alternative(self, obs: Observation, zone: str) -> tuple[Action, Alternative]:
        avoid = {z for z, until in self._avoid.items() if until > obs.elapsed} | {zone}
        zones = [z for z in obs.available_zones() if z not in avoid]
        best = min(zones, key=lambda z: (obs.spot_price[z], z)) if zones else None
        od = obs.on_demand_price
        if best is not None and self._rate(obs.spot_price[best], obs) < od:
            price = obs.spot_price[best]
            return SPOT(best), Alternative(best, price, self._rate(price, obs))
        return ON_DEMAND, Alternative("on-demand", od, od)

    def decide(self, obs: Observation) -> Action:
        zone = obs.on_spot
        if zone is not None and zone in obs.at_risk:
            self._avoid[zone] = obs.elapsed + self.horizon
            price = obs.spot_price[zone]
            cur = Running(zone, True, price, self._rate(price, obs), 0.0)
            action, alt = self._alternative(obs, zone)
            mc = MoveCosts(obs.restart_overhead, 0.0, 0.0, obs.migration_cost.get(alt.pool, 0.0))
            if decide(cur, alt, obs.remaining_work, mc, self.signal) is not None:
                self.moves += 1
                return action
            self.waits += 1
            return obs.placement or self.inner.decide(obs)
        action = self.inner.decide(obs)
        until = self._avoid.get(action.zone or "")
        if action.kind is ActionKind.SPOT and until is not None and until > obs.elapsed:
            if obs.placement == action:
                return action  # it stayed on the signal: keep it
            return self._alternative(obs, action.zone or "")[0]
        return action
