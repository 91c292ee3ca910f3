"""An outage that has already lasted is expected to last longer (learning.outage_left), and
spotwise bridges it on on-demand once it has outlasted the short ones."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from scheduler.core.policy import ON_DEMAND, WAIT, get_policy
from scheduler.core.policy.learning import AvailabilityModel, PoolStats
from scheduler.core.policy.spotwise import SpotwisePolicy
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)

TICK = 0.05  # hours
UP, SHORT, LONG = 60, 5, 80  # ticks: 3 h up, 15 min and 4 h down
CYCLE = [True] * UP + [False] * SHORT  # seven short outages, then a long one
PATTERN = CYCLE * 7 + [True] * UP + [False] * LONG


def _week(down_for: int) -> list[tuple[float, dict[str, bool]]]:
    """A week of zone `a` in PATTERN, ending `down_for` ticks into a fresh outage (the job's
    first observation, at 0 h, continues it)."""
    n = round(7 * 24 / TICK)
    seq = (PATTERN * (n // len(PATTERN) + 1))[: n - down_for] + [True] * UP
    seq = seq[-(n - down_for) :] + [False] * down_for
    return [((i - n) * TICK, {"a": ok}) for i, ok in enumerate(seq)]


def _model(down_for: int) -> AvailabilityModel:
    model = AvailabilityModel()
    for at, avail in _week(down_for):
        model.update(at, avail)
    model.update(0.0, {"a": False})
    return model


def test_the_rest_of_an_outage_grows_with_how_long_it_has_lasted() -> None:
    fresh, aged = _model(0), _model(10)
    # just down: most outages are short, so the rest is about the mean (< 1 h) ...
    assert fresh.outage_left("a") < 1.0
    # ... half an hour in, the short ones are over: what is left is the long ones' rest
    assert 2.0 < aged.outage_left("a") < 4.0
    # the rate model alone is memoryless: the same rest at either age
    assert abs(1 / fresh.rates("a")[1] - 1 / aged.rates("a")[1]) < 0.1


def test_the_same_model_s_estimate_moves_on_as_the_outage_ages() -> None:
    model = _model(0)
    fresh = model.outage_left("a")
    for i in range(1, 11):  # half an hour more of the same outage
        model.update(i * TICK, {"a": False})
    assert model.outage_left("a") > 2 * fresh


def test_an_outage_already_under_way_when_first_seen_ages_but_is_not_recorded() -> None:
    """A pool first seen down (a warmed policy, a restored daemon, the start of the history)
    has been down at least since then: its age grows from there, and as its true length is
    unknown it does not join the outage lengths."""
    model = _model(0)
    model.pools["a"].last, model.pools["a"].since = None, None  # as DeadlinePlanner.warm
    model.update(0.0, {"a": False})
    seen = len(model.pools["a"].outages)
    at_first = model.outage_left("a")
    model.update(0.5, {"a": False})
    assert model.outage_left("a") > 2 * at_first
    model.update(1.0, {"a": True})
    assert len(model.pools["a"].outages) == seen


def test_a_clock_stepping_back_gives_no_negative_age_nor_outage() -> None:
    model = _model(10)
    model.update(-5.0, {"a": False})  # the daemon's wall clock stepped back 5 h
    assert model.outage_left("a") < 1.0  # as at age 0 (at an age of -4.5 h it was 4.7)
    model.update(-4.0, {"a": True})
    assert all(hours > 0 for hours, _ in model.pools["a"].outages)


def test_a_pool_up_now_or_never_seen_down_falls_back_to_its_return_rate() -> None:
    model = _model(0)
    model.update(0.1, {"a": True})
    assert model.outage_left("a") == 1 / model.rates("a")[1]
    assert AvailabilityModel().outage_left("b") == 1 / AvailabilityModel().rates("b")[1]


def _decide(down_for: int) -> object:
    policy = get_policy("spotwise")
    assert isinstance(policy, SpotwisePolicy)
    policy.warm_up(_week(down_for))
    # 48 h job, 1 h restarts, 1.05x deadline: all of its slack is the reserve, so only a
    # short outage (SHORT_OUTAGE) is waited for instead of bridged on on-demand
    now = obs(elapsed=0.0, work=48.0, deadline=50.4, overhead=1.0, avail={"a": False},
              tick=TICK)  # fmt: skip
    policy.observe(now)
    return policy.decide(now)


def test_a_fresh_outage_in_a_pool_of_short_outages_is_waited_for() -> None:
    assert _decide(0) == WAIT


def test_an_outage_that_outlasted_the_short_ones_is_bridged_on_on_demand() -> None:
    """With a memoryless model this outage, half an hour old, is expected back within the
    hour like any other, and the job kept waiting it out (4 h: the slack gone)."""
    assert _decide(10) == ON_DEMAND


def test_outage_history_survives_json_and_its_weights_stay_finite() -> None:
    model = _model(10)
    st = model.pools["a"]
    assert len(st.outages) > 30 and st.since is not None
    back = PoolStats(**json.loads(json.dumps(asdict(st))))
    assert back == st
    # the decay lives in one scale factor; renormalising keeps the weighted estimate
    before = model.outage_left("a")
    st.scale *= 1e-13
    for entry in st.outages:
        entry[1] *= 1e13
    st.record_outage(0.25)
    model.update(0.0, {"a": False})
    assert st.scale == 1.0 and all(w < 1e6 for _, w in st.outages)
    assert model.outage_left("a") == pytest.approx(before, rel=0.05)
