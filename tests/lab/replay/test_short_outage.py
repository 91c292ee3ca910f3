"""spotwise does not bridge an outage on on-demand when spot is expected back before the
on-demand launch would do any work (spotwise.SpotwisePolicy._can_bridge)."""

from __future__ import annotations

import math

import pytest

from scheduler.core.policy import ON_DEMAND, WAIT, get_policy
from scheduler.core.policy.spotwise import SpotwisePolicy
from tests.support.replay import obs, warm_periodic

pytestmark = pytest.mark.timeout(30)

TICK = 0.05  # hours: 3 h up is 60 ticks, 15 min down 5, 4 h down 80


def _decide(up_ticks: int, down_ticks: int) -> object:
    policy = get_policy("spotwise")
    assert isinstance(policy, SpotwisePolicy)
    warm_periodic(policy, up_ticks, down_ticks, TICK)
    # 48 h job, 1 h restarts, 1.05x deadline, starting while spot is down: 1.4 h of
    # slack, all of it the reserve, so the rule would bridge the outage on on-demand
    now = obs(elapsed=0.0, work=48.0, deadline=50.4, overhead=1.0, avail={"a": False})
    policy.observe(now)
    return policy.decide(now)


def test_a_pool_whose_outages_are_shorter_than_a_restart_is_waited_for() -> None:
    """Outages of 15 minutes: an on-demand launch would still be in its hour of overhead
    when spot is back, so the bridge costs the same slack as waiting, and money."""
    assert _decide(up_ticks=60, down_ticks=5) == WAIT


def test_a_pool_whose_outages_outlast_a_restart_is_bridged() -> None:
    assert _decide(up_ticks=60, down_ticks=80) == ON_DEMAND


def test_the_daemon_s_unpriced_down_pools_count_as_the_outage() -> None:
    """The daemon gives a pool without capacity no price (infinite): the check must still
    see it as the outage to wait for (a review found it returning before the check)."""
    policy = get_policy("spotwise")
    assert isinstance(policy, SpotwisePolicy)
    warm_periodic(policy, 60, 5, TICK)
    now = obs(
        elapsed=0.0, work=48.0, deadline=50.4, overhead=1.0, avail={"a": False},
        prices={"a": math.inf},
    )  # fmt: skip
    policy.observe(now)
    assert policy.decide(now) == WAIT


def test_pools_that_are_up_but_priced_out_are_not_an_outage_to_wait_for() -> None:
    """Three pools up at 0.95x on-demand, no history: nothing is down, so there is no
    outage to be short; the job runs on-demand as before."""
    zones = {f"z{i}": True for i in range(3)}
    now = obs(elapsed=0.0, work=48.0, deadline=50.4, overhead=1.0, avail=zones,
              prices=dict.fromkeys(zones, 2.85))  # fmt: skip
    policy = get_policy("spotwise")
    policy.observe(now)
    assert policy.decide(now) == ON_DEMAND
