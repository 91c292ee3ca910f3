"""A spot spell that has lasted is expected to last longer (SpotwisePolicy._spell_hours):
after a flaky stretch the learned loss rate alone kept a job on on-demand beside a pool that
had been up for hours."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.policy import ON_DEMAND, SPOT
from scheduler.core.policy.spotwise import SPELL_RESIDUAL, TIGHT_HI, SpotwisePolicy
from scheduler.lab.replay.split import Split, periods
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)

WORK = 40.0


def _seen(up_for: float) -> SpotwisePolicy:
    """Two days of pool `a` ($0.50/h) flickering (up 0.3 h, down 0.2 h), then up for
    `up_for` hours until now."""
    policy = SpotwisePolicy()
    t = -48.0
    while t < -up_for:
        policy.model.update(t, {"a": True}, {"a": 0.5})
        t += 0.3
        policy.model.update(t, {"a": False})
        t += 0.2
    policy.model.update(-up_for, {"a": True}, {"a": 0.5})
    return policy


def _on_demand(up_for: float, slack: float):
    """On on-demand ($3/h) with 40 h of work left, a 1 h restart and `slack` hours to spare."""
    policy = _seen(up_for)
    now = obs(work=WORK, deadline=WORK + 1.0 + slack, overhead=1.0, placement=ON_DEMAND,
              prices={"a": 0.5}, od=3.0)  # fmt: skip
    policy.observe(now)
    return policy, now


def test_a_pool_up_for_hours_after_a_flaky_stretch_is_worth_leaving_on_demand_for() -> None:
    policy, now = _on_demand(up_for=8.0, slack=10.0)
    lam, _ = policy.model.rates("a")
    assert 1.0 / lam < 1.0  # the rate still says spells of half an hour
    expected = SPELL_RESIDUAL * 8.0
    assert policy._spell_hours(now, "a") == pytest.approx(expected)
    # its rate counts one interruption (a 1 h restart) per expected spell, not per 1 / lam
    assert policy._rate_cost(now, "a") == pytest.approx(0.5 * (1.0 + 1.0 / expected))
    assert policy.decide(now) == SPOT("a")
    # a spell just begun, or an hour old, is not yet enough to pay a 1 h restart; one that
    # has lasted two hours (four more expected) is
    for up_for in (0.0, 1.0):
        assert SpotwisePolicy.decide(*_on_demand(up_for, slack=10.0)) == ON_DEMAND
    assert SpotwisePolicy.decide(*_on_demand(2.0, slack=10.0)) == SPOT("a")


def test_a_tight_deadline_keeps_to_the_learned_rate() -> None:
    slack = 5.0
    assert slack / WORK < TIGHT_HI
    policy, now = _on_demand(up_for=8.0, slack=slack)
    lam, _ = policy.model.rates("a")
    assert policy._spell_hours(now, "a") == pytest.approx(1.0 / lam)
    assert policy._rate_cost(now, "a") == pytest.approx(0.5 * (1.0 + lam))
    assert policy.decide(now) == ON_DEMAND


def test_a_pool_that_is_down_has_no_spell_to_count() -> None:
    policy, now = _on_demand(up_for=8.0, slack=10.0)
    policy.model.update(0.5, {"a": False})
    policy.model.update(3.0, {"a": False})  # down for 2.5 h: an outage's age, not a spell's
    lam, _ = policy.model.rates("a")
    assert 1.0 / lam < 2.5
    assert policy._spell_hours(now, "a") == pytest.approx(1.0 / lam)


def _spells(split: Split) -> np.ndarray:
    """Hours of every spot spell seen whole on the split's single-zone traces (not one
    already up at the start of a period, nor one still up at its end)."""
    out: list[float] = []
    for period in periods(split):
        if period.multi_zone:
            continue
        up = period.trace.available[0, period.lo : period.hi]
        # run lengths of True: the edges where `up` turns on and off
        edges = np.flatnonzero(np.diff(np.concatenate(([0], up.astype(np.int8), [0]))))
        starts, ends = edges[::2], edges[1::2]
        whole = (starts > 0) & (ends < len(up))  # the others' lengths are unknown
        out.extend((ends[whole] - starts[whole]) * period.trace.gap_hours)
    return np.asarray(out)


def test_spell_residual_is_the_train_split_s_median_rest_of_a_spell_by_its_age() -> None:
    """SPELL_RESIDUAL comes from the data it was tuned on: a spell that has lasted 0.5 to
    2 h has, at the median, about twice its age still to go."""
    spells = _spells(Split.TRAIN)
    assert len(spells) > 500
    for age in (0.5, 1.0, 2.0):
        rest = spells[spells > age] - age
        assert len(rest) > 100
        assert np.median(rest) / age == pytest.approx(SPELL_RESIDUAL, rel=0.25)
