"""Hand-made observations and scripted policies for the replay tests."""

from __future__ import annotations

from scheduler.core.policy.base import Action, Observation, Policy
from scheduler.core.policy.spotwise import SpotwisePolicy


def obs(
    *,
    elapsed: float = 0.0,
    done: float = 0.0,
    work: float = 10.0,
    deadline: float = 20.0,
    overhead: float = 0.1,
    remaining_overhead: float = 0.0,
    placement: Action | None = None,
    avail: dict[str, bool] | None = None,
    prices: dict[str, float] | None = None,
    od: float = 3.0,
    tick: float = 0.1,
) -> Observation:
    avail = {"a": True} if avail is None else avail
    prices = prices or dict.fromkeys(avail, 1.0)
    return Observation(
        elapsed=elapsed,
        work_done=done,
        work_total=work,
        deadline=deadline,
        restart_overhead=overhead,
        remaining_overhead=remaining_overhead,
        placement=placement,
        spot_available=avail,
        spot_price=prices,
        on_demand_price=od,
        tick_hours=tick,
    )


class Scripted(Policy):
    """Plays a fixed list of actions (the last one repeats)."""

    name = "scripted"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = actions
        self.seen: list[Observation] = []

    def decide(self, obs: Observation) -> Action:
        self.seen.append(obs)
        i = min(len(self.seen) - 1, len(self.actions) - 1)
        return self.actions[i]


def warm_periodic(policy: SpotwisePolicy, up_ticks: int, down_ticks: int, tick: float) -> None:
    """A week of zone `a` coming and going with this period, seen before the job."""
    n = round(7 * 24 / tick)
    period = up_ticks + down_ticks
    policy.warm_up([((i - n) * tick, {"a": i % period < up_ticks}) for i in range(n)])
