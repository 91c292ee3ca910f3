"""An outage waited out above the reserve is bridged on on-demand once the slack it has
burned, beyond the on-demand it avoided, would have paid the on-demand launch (ski rental,
SpotwisePolicy._rent_paid); a bridge is held until spot is back."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from scheduler.core.policy import ON_DEMAND, WAIT
from scheduler.core.policy.safety import hedge_margin, regret_if_committed
from scheduler.core.policy.spotwise import SpotwisePolicy
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)

OD, OVERHEAD, WORK = 3.0, 0.5, 40.0


def _seen(down_for: float) -> SpotwisePolicy:
    """A week of pool `a` ($1/h, on-demand $3/h): 2 h up, then an outage, most of one tick
    (6 min), every fifth 3 h long; down now for `down_for` hours."""
    policy = SpotwisePolicy()
    t, k = -7 * 24.0, 0
    while t < -down_for:
        for _ in range(20):
            policy.model.update(t, {"a": True}, {"a": 1.0})
            t += 0.1
        for _ in range(30 if k % 5 == 4 else 1):
            policy.model.update(t, {"a": False})
            t += 0.1
        k += 1
    policy.model.update(-down_for, {"a": True}, {"a": 1.0})
    policy.model.update(-down_for + 1e-6, {"a": False})
    return policy


def _decide(
    down_for: float,
    slack: float,
    price: float = 1.0,
    placement=None,
    overhead: float = OVERHEAD,
    spent: float | None = None,
):
    """The policy's action at elapsed 0, with `slack` hours to spare on 40 h of work."""
    policy = _seen(down_for)
    now = obs(work=WORK, deadline=WORK + overhead + slack, overhead=overhead, avail={"a": False},
              prices={"a": price}, od=OD, placement=placement)  # fmt: skip
    now = replace(now, spent=spent)
    policy.observe(now)
    return policy, now, policy.decide(now)


def test_short_slack_waits_an_outage_until_the_burned_slack_would_have_paid_the_bridge() -> None:
    policy, now, first = _decide(down_for=1.0, slack=6.0)
    # above the reserve, and the slack is short of the restarts finishing on spot takes
    assert now.slack_if_launch - now.tick_hours > policy._reserve(now)
    scarcity = policy._slack_scarcity(now, "a")
    assert scarcity > 1.5
    # the break-even age: (saving per hour x (scarcity - 1)) x age = od x o
    saving = OD - policy._rate_cost(now, "a")
    breakeven = OD * OVERHEAD / (saving * (scarcity - 1.0))
    assert 1.0 < breakeven < 1.5
    assert first == WAIT  # an hour in: not yet (the old rule waited whatever the age)
    assert _decide(down_for=1.5, slack=6.0)[2] == ON_DEMAND
    # scarcer slack burns faster: the bridge comes sooner
    assert _decide(down_for=1.0, slack=4.0)[2] == ON_DEMAND
    # a flicker is waited out
    assert _decide(down_for=0.05, slack=4.0)[2] == WAIT


def test_ample_slack_waits_whatever_the_age() -> None:
    for age in (0.5, 1.0, 2.0):
        policy, now, act = _decide(down_for=age, slack=30.0)
        assert policy._slack_scarcity(now, "a") == 1.0
        assert act == WAIT


def test_a_pool_the_daemon_shows_unpriced_counts_at_its_last_seen_price() -> None:
    """The daemon's pools without capacity have no price (inf): the outage is priced by
    what the pool cost when last up, so the daemon bridges as the bench does."""
    assert _decide(down_for=1.5, slack=6.0, price=math.inf)[2] == ON_DEMAND
    assert _decide(down_for=1.0, slack=6.0, price=math.inf)[2] == WAIT


@pytest.mark.parametrize("price", [1.0, math.inf])
def test_no_bridge_the_hedge_margin_cannot_pay_in_the_daemon_either(price: float) -> None:
    """A bridge needs the hedge's margin to pay an on-demand launch and the relaunch on spot
    ((3 + 1) x 0.5 h here); with $1 of margin left the job waits. The daemon's unpriced
    outage used to pass as "no spot to come back to" and skip that check (a review found
    it): now it is judged at the pool's last price, as the bench judges it."""
    policy = _seen(2.0)
    now = obs(work=WORK, deadline=WORK + OVERHEAD + 6.0, overhead=OVERHEAD, avail={"a": False},
              prices={"a": 1.0}, od=OD)  # fmt: skip
    spent = hedge_margin(now) - 1.0 - regret_if_committed(now, 0.0)
    assert _decide(down_for=2.0, slack=6.0, price=price)[2] == ON_DEMAND  # with the margin
    assert _decide(down_for=2.0, slack=6.0, price=price, spent=spent)[2] == WAIT
    assert policy._slack_scarcity(now, "a") > 1.0


def test_no_overhead_never_bridges_early() -> None:
    """With no restart overhead an on-demand launch costs nothing to wait for, and slack
    is worth no more than the on-demand it avoids: no excess, no bridge (the rule compared
    0 >= 0 and bridged every outage at once, a review found)."""
    for age in (0.05, 1.0, 3.0):
        assert _decide(down_for=age, slack=30.0, overhead=0.0)[2] == WAIT


def test_a_bridge_is_held_until_spot_is_back() -> None:
    """On on-demand in an outage with slack to spare, the job used to leave to wait (spot
    expected back within the spare slack), then bridge again: a launch each time."""
    policy, now, act = _decide(down_for=0.5, slack=30.0, placement=ON_DEMAND)
    spare = now.slack_if_launch - now.tick_hours - policy._reserve(now) - 2 * OVERHEAD
    assert spare >= policy._expected_outage(now)  # the old rule's reason to leave
    assert act == ON_DEMAND
