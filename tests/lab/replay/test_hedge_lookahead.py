"""The regret hedge looks over a launch's whole overhead, and credits the work a checkpoint
on the notice keeps (scheduler.core.policy.safety.hedge_allows_spot)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from scheduler.core.policy import ON_DEMAND, SPOT, WAIT, get_policy
from scheduler.core.policy.base import Observation
from scheduler.core.policy.safety import (
    all_on_demand_cost,
    hedge_allows_spot,
    hedge_margin,
    regret_if_committed,
)

pytestmark = pytest.mark.timeout(30)

OD, SPOT_PRICE, G, OVERHEAD = 3.0, 1.0, 0.1, 1.0


def _obs(**kw: object) -> Observation:
    base = Observation(
        elapsed=2.0, work_done=1.0, work_total=12.0, deadline=24.0, restart_overhead=OVERHEAD,
        remaining_overhead=0.0, placement=SPOT("a"), spot_available={"a": True},
        spot_price={"a": SPOT_PRICE}, on_demand_price=OD, tick_hours=G,
    )  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def _spent_for_regret(obs: Observation, regret: float) -> float:
    """The spend at which going on-demand for good now would leave `regret` USD above
    all-on-demand (committing from spot pays a fresh restart)."""
    finish = OD * (obs.remaining_work + obs.restart_overhead)
    return regret + all_on_demand_cost(obs) - finish


def test_a_running_attempt_past_its_overhead_is_kept_at_the_margin() -> None:
    """Its next tick is billed, but the notice's checkpoint keeps the work: at worst the job
    ends on on-demand from a lower regret than leaving now. (The old per-tick check assumed
    nothing was kept and sent this job to on-demand, paying a restart for nothing.)"""
    obs = _obs()
    spent = _spent_for_regret(obs, hedge_margin(obs))
    assert hedge_allows_spot(obs, "a", spent)
    # the same attempt with periodic checkpoints keeps nothing this tick: refused
    assert not hedge_allows_spot(replace(obs, checkpoint_interval=1.0), "a", spent)


def test_a_running_attempt_still_in_its_overhead_must_afford_the_rest_of_it() -> None:
    obs = _obs(remaining_overhead=0.5)
    margin = hedge_margin(obs)
    fits = _spent_for_regret(obs, margin - SPOT_PRICE * 0.5)
    assert hedge_allows_spot(obs, "a", fits)
    assert not hedge_allows_spot(obs, "a", fits + 0.01)


def test_a_launch_whose_overhead_the_margin_cannot_pay_is_refused_up_front() -> None:
    """One tick of the launch fits the margin, the whole overhead does not: refusing now
    is what keeps the overhead from being cut off halfway (the old check allowed it)."""
    idle = _obs(placement=None)
    margin = hedge_margin(idle)
    spent = _spent_for_regret(idle, margin - SPOT_PRICE * OVERHEAD / 2)
    assert margin - regret_if_committed(idle, spent) > SPOT_PRICE * G  # a tick alone would fit
    assert not hedge_allows_spot(idle, "a", spent)
    assert hedge_allows_spot(idle, "a", _spent_for_regret(idle, margin - SPOT_PRICE * OVERHEAD))


def test_spotwise_does_not_leave_on_demand_to_wait_for_a_launch_the_hedge_refuses() -> None:
    """Waiting spends nothing, so the hedge's verdict on a launch cannot change while the
    job waits: leaving on-demand would only come back to it, paying its overhead again.
    (In an outage a bridge is now held until spot is back whatever the hedge says, see
    test_ski_bridge.py; the hedge's own gate, _may_leave, still guards the other ways off
    on-demand.)"""
    on_od = _obs(placement=ON_DEMAND, spot_available={"a": False})
    idle = replace(on_od, placement=None)
    refused = _spent_for_regret(idle, hedge_margin(idle) - SPOT_PRICE * OVERHEAD / 2)
    allowed = _spent_for_regret(idle, 0.0)
    assert get_policy("spotwise").decide(replace(on_od, spent=refused)) == ON_DEMAND
    assert get_policy("spotwise").decide(replace(on_od, spent=allowed)) == ON_DEMAND
    policy = get_policy("spotwise")
    assert policy._may_leave(on_od, allowed)  # type: ignore[attr-defined]
    assert not policy._may_leave(on_od, refused)  # type: ignore[attr-defined]


def test_the_last_tick_of_a_running_attempt_is_billed_only_until_the_work_is_done() -> None:
    """Three minutes of work left on a six-minute tick, spot at 0.85x: the attempt stops
    billing when the
    work is done, so keeping it is never worse than leaving (a review found the hedge
    billing the whole tick and sending the job to on-demand for its last three minutes)."""
    obs = _obs(work_done=11.95, spot_price={"a": 0.85 * OD})
    assert hedge_allows_spot(obs, "a", _spent_for_regret(obs, hedge_margin(obs)))


def test_the_daemon_s_unpriced_pools_do_not_keep_a_job_on_on_demand() -> None:
    """The daemon shows a pool without capacity at an unknown (infinite) price: leaving
    on-demand to wait for it is judged on the margin alone, as before the hedge's check."""
    on_od = _obs(placement=ON_DEMAND, spot_available={"a": False}, spot_price={"a": math.inf})
    assert (
        get_policy("spotwise").decide(replace(on_od, spent=_spent_for_regret(on_od, 0.0))) == WAIT
    )


def test_a_pool_too_dear_to_enter_does_not_count_as_one_to_wait_for() -> None:
    """Zone b is up at 0.95x on-demand (above the 0.9x entry price) and zone a is down; the
    hedge refuses a (its migration), so waiting can only end back on on-demand."""
    on_od = _obs(
        placement=ON_DEMAND, spot_available={"a": False, "b": True},
        spot_price={"a": 0.3 * OD, "b": 0.95 * OD}, migration_cost={"a": 3.0},
    )  # fmt: skip
    idle = replace(on_od, placement=None)
    spent = _spent_for_regret(idle, hedge_margin(idle) - 3.0)  # b fits, a (+$3 to move) not
    assert hedge_allows_spot(on_od, "b", spent) and not hedge_allows_spot(on_od, "a", spent)
    assert get_policy("spotwise").decide(replace(on_od, spent=spent)) == ON_DEMAND
