"""The rollout arbiter: its cost estimates on known futures, and the choices it makes."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.policy import ON_DEMAND, SPOT, WAIT, spotwise
from scheduler.core.policy.rollout import Model, expected_costs
from scheduler.core.policy.spotwise import SpotwisePolicy
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import single_zone
from tests.support.replay import obs, warm_periodic

pytestmark = pytest.mark.timeout(60)


def _model(lam: float, mu: float, slope: float = 0.0, gain: float = -1.0) -> Model:
    # switch terms (saving per hour, spell, fixed, extra): a constant `gain`
    switch = np.array([[0.0], [1e9], [-gain], [0.0]])
    return Model(("a",), np.array([lam]), np.array([mu]), slope, switch, np.array([0]))


def test_a_pool_that_never_fails_costs_the_work_on_spot() -> None:
    o = obs(work=10.0, deadline=20.0, overhead=0.5, avail={"a": True}, od=3.0, tick=0.5)
    costs = expected_costs(o, _model(0.0, 1.0), [SPOT("a"), SPOT("a"), SPOT("a")])
    assert costs == pytest.approx([1.0 * 10.5] * 3)
    # on-demand now: greedy stays there for good; spotwise's rule (gain < 0) too
    costs = expected_costs(o, _model(0.0, 1.0), [ON_DEMAND, ON_DEMAND, ON_DEMAND])
    assert costs[:2] == pytest.approx([3.0 * 10.5] * 2)


def test_a_pool_that_never_returns_ends_on_demand() -> None:
    o = obs(work=10.0, deadline=20.0, overhead=0.5, avail={"a": False}, od=3.0, tick=0.5)
    costs = expected_costs(o, _model(0.5, 0.0), [ON_DEMAND, WAIT, WAIT])
    assert costs == pytest.approx([3.0 * 10.5] * 3)


def test_short_outages_are_worth_waiting_out_long_ones_are_not() -> None:
    o = obs(work=10.0, deadline=14.0, overhead=1.0, avail={"a": False}, od=3.0, tick=0.25)
    first = [ON_DEMAND, WAIT, WAIT]
    short = expected_costs(o, _model(0.05, 4.0), first)
    assert short[1] < short[0] - 5.0  # waiting ~15 min beats 11 h of on-demand
    # outages of ~50 h: waiting only burns slack; greedy ends on on-demand too, no cheaper
    long = expected_costs(o, _model(0.05, 0.02), first)
    assert short[0] - short[1] > 5 * (long[0] - long[1])


def test_the_same_inputs_give_the_same_estimate() -> None:
    o = obs(work=10.0, deadline=14.0, overhead=1.0, avail={"a": False}, tick=0.25)
    a = expected_costs(o, _model(0.2, 1.0), [ON_DEMAND, WAIT, WAIT])
    b = expected_costs(o, _model(0.2, 1.0), [ON_DEMAND, WAIT, WAIT])
    assert np.array_equal(a, b)


def test_spotwise_waits_out_short_outages_its_own_rule_would_pay_on_demand_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restarts cost 1 h and outages last 15 min: at its slack reserve spotwise's own rule
    goes on-demand, greedy waits; the rollouts side with waiting (and cache the verdict)."""
    # the rule's own checks already wait here: the margin of a 10 h job cannot pay for a
    # 1 h bridge (BRIDGE_K), and outages are shorter than a restart (SHORT_OUTAGE); both
    # off, to put the arbiter to the question
    monkeypatch.setattr(spotwise, "BRIDGE_K", 0.0)
    monkeypatch.setattr(spotwise, "SHORT_OUTAGE", 0.0)  # nor wait for a short outage
    monkeypatch.setattr(spotwise, "PACE", 0.5)  # the slack reserve this job was sized for
    o = obs(work=10.0, deadline=16.0, elapsed=1.5, overhead=1.0, avail={"a": False}, tick=0.25)
    own = _OwnRuleOnly()
    warm_periodic(own, 31, 1, 0.25)
    assert own.decide(o) == ON_DEMAND
    monkeypatch.setattr(spotwise, "ARBITER", True)  # off by default (README: train split)
    monkeypatch.setattr(spotwise, "ROLLOUT_MARGIN", 0.0)
    pol = SpotwisePolicy()
    warm_periodic(pol, 31, 1, 0.25)
    assert pol.decide(o) == WAIT
    assert pol.decide(o) == WAIT and pol.rollouts == 1  # same question, same hour: cached
    # with ~2-day outages the wait buys nothing: its own rule stands
    slow = SpotwisePolicy()
    warm_periodic(slow, 31, 192, 0.25)
    assert slow.decide(o) == ON_DEMAND and slow.rollouts == 1
    # the expected saving (under $2) is below the default margin (one restart on-demand, $3)
    monkeypatch.setattr(spotwise, "ROLLOUT_MARGIN", 1.0)
    strict = SpotwisePolicy()
    warm_periodic(strict, 31, 1, 0.25)
    assert strict.decide(o) == ON_DEMAND and strict.rollouts == 1


def test_spotwise_meets_deadlines_on_a_flaky_pool() -> None:
    g = 0.25
    avail = [(i % 20) < 19 for i in range(400)]
    trace = single_zone(avail, g, 1.0, 3.0)
    history = single_zone([(i % 20) < 19 for i in range(7 * 96)], g, 1.0, 3.0)
    for o in (0.2, 1.0):
        out = simulate(trace, Job(48.0, 52.0, o), SpotwisePolicy(), history=history)
        assert out.met_deadline


class _OwnRuleOnly(SpotwisePolicy):
    """spotwise without the arbiter (its own rule every time)."""

    def _arbitrate(self, obs, own):  # type: ignore[no-untyped-def]
        return own
