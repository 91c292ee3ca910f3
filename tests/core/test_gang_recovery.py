"""The replace-one-node decision: a pure function of the pool's hazard, its capacity, a node's
boot time, the waiting nodes' billing and the wait bound."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from scheduler.core.gang_recovery import (
    Elsewhere,
    GangLoss,
    Recovery,
    Replacement,
    decide,
)

POOL = "aws/us-east-1a/p4d.24xlarge/spot"
OTHER = "aws/us-east-1b/p4d.24xlarge/spot"


def _loss(**changes) -> GangLoss:
    base = GangLoss(
        nodes=4,
        lost=1,
        price_per_hour=10.0,
        hazard_per_hour=0.1,
        boot_hours=0.1,
        drain_hours=2 / 60,
        wait_bound_hours=10 / 60,
        replacement=Replacement(POOL, 10.0, 1.0, 0.1),
        elsewhere=Elsewhere(OTHER, 10.0, 0.1),
        remaining_hours=10.0,
    )
    return replace(base, **changes)


def test_replacing_one_node_beats_re_placing_four_in_a_calm_pool():
    c = decide(_loss())
    assert c.replace and c.replace_estimate is not None
    # The survivors wait (3 x $10/h) and the replacement boots ($10/h) for the boot, with
    # the chance of a second loss meanwhile; re-placing adds the drain and N boots.
    e = math.exp(-4 * 0.1 * 0.1)
    want = e * 40 * 0.1 + (1 - e) * 40 * 0.05 + (1 - e) * c.whole_estimate.usd
    assert c.replace_estimate.usd == pytest.approx(want)
    assert c.whole_estimate.usd == pytest.approx(3 * 10 * 2 / 60 + 4 * 10 * 0.1)
    assert c.replace_estimate.hours < c.whole_estimate.hours
    assert c.reason.startswith(f"replacing 1 of 4 nodes in {POOL}: ~")


def test_a_hazardous_pool_with_a_safer_one_elsewhere_is_left_whole():
    c = decide(
        _loss(
            hazard_per_hour=3.0,
            replacement=Replacement(POOL, 10.0, 1.0, 3.0),
            elsewhere=Elsewhere(OTHER, 10.0, 0.05),
        )
    )
    assert not c.replace
    assert c.reason.startswith("re-placing the gang whole: ~") and OTHER in c.reason
    assert c.replace_estimate is not None and c.replace_estimate.score > c.whole_estimate.score


def test_the_same_hazard_everywhere_keeps_the_gang():
    c = decide(
        _loss(
            hazard_per_hour=1.0,
            replacement=Replacement(POOL, 10.0, 1.0, 1.0),
            elsewhere=Elsewhere(OTHER, 10.0, 1.0),
        )
    )
    assert c.replace


def test_a_much_cheaper_pool_elsewhere_can_win_over_keeping_the_gang():
    c = decide(_loss(remaining_hours=24.0, elsewhere=Elsewhere(OTHER, 2.0, 0.1)))
    # Cheaper boots there; over the risk horizon the cheaper pool's recoveries cost less too.
    assert c.whole_estimate.usd < c.replace_estimate.usd  # type: ignore[union-attr]


def test_no_capacity_anywhere_for_the_node_is_whole():
    assert not decide(_loss(replacement=None)).replace
    c = decide(_loss(replacement=Replacement(POOL, 10.0, 0.0, 0.1)))
    assert not c.replace and "no pool the placement allows" in c.reason


def test_partial_capacity_lowers_the_odds_and_shows_in_the_estimate():
    full = decide(_loss()).replace_estimate
    half = decide(_loss(replacement=Replacement(POOL, 10.0, 0.5, 0.1))).replace_estimate
    assert half is not None and full is not None and half.hours > full.hours


def test_a_boot_longer_than_the_wait_bound_is_whole():
    c = decide(_loss(boot_hours=0.5))
    assert not c.replace and "past the 10 min wait bound" in c.reason


def test_every_node_lost_is_whole():
    c = decide(_loss(lost=4))
    assert not c.replace and c.reason.endswith("every node was lost")


def test_waiting_nodes_are_billed_in_the_estimate():
    two = decide(_loss(nodes=2)).replace_estimate
    eight = decide(_loss(nodes=8)).replace_estimate
    assert two is not None and eight is not None
    assert eight.usd > 3 * two.usd  # 7 survivors wait instead of 1


def test_a_replacement_in_another_pool_pays_its_price():
    cheap = decide(_loss(replacement=Replacement(POOL, 10.0, 1.0, 0.1))).replace_estimate
    dear = decide(_loss(replacement=Replacement(OTHER, 30.0, 1.0, 0.0))).replace_estimate
    assert cheap is not None and dear is not None
    assert dear.usd - cheap.usd == pytest.approx(20.0 * 0.1, rel=0.1)


def test_the_modes():
    assert decide(_loss(), Recovery.WHOLE).replace is False
    assert "recovery = whole" in decide(_loss(), Recovery.WHOLE).reason
    forced = decide(
        _loss(hazard_per_hour=3.0, replacement=Replacement(POOL, 10.0, 1.0, 3.0),
              elsewhere=Elsewhere(OTHER, 10.0, 0.05)),
        Recovery.REPLACE,
    )  # fmt: skip
    assert forced.replace and "recovery = replace" in forced.reason
    # Even forced, a replacement needs somewhere to go.
    assert not decide(_loss(replacement=None), Recovery.REPLACE).replace
