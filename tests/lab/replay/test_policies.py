"""Policy decisions on hand-made observations, incl. the greedy/UP corner cases."""

from __future__ import annotations

import pytest

from scheduler.core.policy import ON_DEMAND, POLICY_NAMES, SPOT, WAIT, ActionKind, get_policy
from scheduler.core.policy.base import Action
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)


def test_registry() -> None:
    assert set(POLICY_NAMES) == {"on-demand", "greedy", "uniform-progress", "optimal", "spotwise"}
    assert get_policy("greedy") is not get_policy("greedy")  # fresh state per job
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(ValueError):
        Action(ActionKind.SPOT)


# ---- greedy ----------------------------------------------------------------------------


def test_greedy_spot_when_available_else_wait() -> None:
    p = get_policy("greedy")
    assert p.decide(obs(avail={"a": True})) == SPOT("a")
    assert p.decide(obs(avail={"a": False})) == WAIT


def test_greedy_cheapest_zone_and_stays_put() -> None:
    p = get_policy("greedy")
    o = obs(avail={"a": True, "b": True}, prices={"a": 2.0, "b": 1.0})
    assert p.decide(o) == SPOT("b")
    o = obs(avail={"a": True, "b": True}, prices={"a": 2.0, "b": 1.0}, placement=SPOT("a"))
    assert p.decide(o) == SPOT("a")


def test_greedy_switches_to_on_demand_when_slack_is_gone() -> None:
    p = get_policy("greedy")
    # 10 h of work, 10.2 h left, overhead 0.1, tick 0.1: waiting one more tick leaves exactly
    # work + one restart; one tick later it no longer does.
    assert p.decide(obs(elapsed=9.8, deadline=20.0, avail={"a": False})) == WAIT
    assert p.decide(obs(elapsed=9.85, deadline=20.0, avail={"a": False})) == ON_DEMAND
    # once on on-demand, greedy stays there even if spot comes back
    assert p.decide(obs(elapsed=9.9, placement=ON_DEMAND, avail={"a": True})) == ON_DEMAND
    # a spot launch that could not survive one interruption is not taken
    assert p.decide(obs(elapsed=9.85, avail={"a": True})) == ON_DEMAND


# ---- uniform progress --------------------------------------------------------------------


def test_up_behind_the_line() -> None:
    p = get_policy("uniform-progress")
    # line at t=5 is 10*5/20 = 2.5 h; 1 h done = behind
    assert p.decide(obs(elapsed=5, done=1, avail={"a": False})) == ON_DEMAND
    assert p.decide(obs(elapsed=5, done=1, avail={"a": True})) == SPOT("a")


def test_up_ahead_of_the_line() -> None:
    p = get_policy("uniform-progress")
    assert p.decide(obs(elapsed=5, done=4, avail={"a": False})) == WAIT
    assert p.decide(obs(elapsed=5, done=4, avail={"a": True})) == SPOT("a")


def test_up_hysteresis_on_demand_to_spot() -> None:
    p = get_policy("uniform-progress")
    # line at t=5: 2.5 h; shifted by 2d (0.2 h): (5.2)*10/20 = 2.6 h.
    on_od = {"placement": ON_DEMAND, "avail": {"a": True}, "elapsed": 5.0}
    assert p.decide(obs(done=2.55, **on_od)) == ON_DEMAND  # ahead, but not by 2d
    assert p.decide(obs(done=2.65, **on_od)) == SPOT("a")  # ahead by more than 2d
    # ahead but no spot: on-demand keeps running (hysteresis), idle would wait
    assert p.decide(obs(done=2.65, placement=ON_DEMAND, avail={"a": False}, elapsed=5)) == (
        ON_DEMAND
    )


def test_up_safety_margin_two_overheads() -> None:
    p = get_policy("uniform-progress")
    # ahead of the line, but 10 h of work + 2 x 0.1 h does not fit the 10.1 h left
    assert p.decide(obs(elapsed=9.9, done=0.0, work=10, deadline=20, avail={"a": True})) == (
        ON_DEMAND
    )
    # running spot with the overhead paid and < 1 restart of slack: keep spot
    o = obs(elapsed=9.95, done=0.0, placement=SPOT("a"), avail={"a": True})
    assert p.decide(o) == SPOT("a")


# ---- spotwise ----------------------------------------------------------------------------


def test_spotwise_never_starts_unsafe_spot() -> None:
    p = get_policy("spotwise")
    # slack after a launch (0.05 h) would not cover one interruption (0.1 h)
    o = obs(elapsed=9.85, work=10, deadline=20, avail={"a": True})
    assert p.decide(o) == ON_DEMAND


def test_spotwise_waits_with_slack_and_uses_on_demand_without() -> None:
    p = get_policy("spotwise")
    assert p.decide(obs(elapsed=0, avail={"a": False})) == WAIT
    assert p.decide(obs(elapsed=9.85, avail={"a": False})) == ON_DEMAND


def test_spotwise_returns_to_spot_from_on_demand() -> None:
    p = get_policy("spotwise")
    assert p.decide(obs(elapsed=5, done=4, placement=ON_DEMAND, avail={"a": True})) == SPOT("a")


def test_spotwise_prefers_cheaper_zone() -> None:
    p = get_policy("spotwise")
    o = obs(avail={"a": True, "b": True}, prices={"a": 1.5, "b": 1.0})
    assert p.decide(o) == SPOT("b")


def test_spotwise_learns_interruption_rates() -> None:
    p = get_policy("spotwise")
    for i in range(200):  # zone "a" flaps every tick, "b" never drops
        o = obs(elapsed=i * 0.1, avail={"a": i % 2 == 0, "b": True})
        p.observe(o)
    lam_a, _ = p.model.rates("a")
    lam_b, _ = p.model.rates("b")
    assert lam_a > 5 * lam_b
    o = obs(elapsed=20.0, deadline=40.0, avail={"a": True, "b": True}, prices={"a": 1.0, "b": 1.1})
    assert p.decide(o) == SPOT("b")  # slightly dearer but stable


def test_daemon_style_observation_with_unpriced_zones() -> None:
    """The daemon lists zones it has seen but that offer nothing now with an infinite price."""
    inf = float("inf")
    for name in POLICY_NAMES:
        if name == "optimal":
            continue
        p = get_policy(name)
        o = obs(avail={"a": False, "b": True}, prices={"a": inf, "b": 1.2}, overhead=0.0)
        p.observe(o)
        act = p.decide(o)
        assert act in (SPOT("b"), ON_DEMAND, WAIT), name
        o = obs(avail={"a": False, "b": False}, prices={"a": inf, "b": inf}, elapsed=9.9)
        assert p.decide(o) == ON_DEMAND, name
