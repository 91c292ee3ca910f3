"""The slack a restart uses is priced by what it still buys (SpotwisePolicy._slack_value):
short of the restarts that finishing on spot would take, an hour of slack is worth more
than an hour of on-demand."""

from __future__ import annotations

import pytest

from scheduler.core.policy import ON_DEMAND, SPOT
from scheduler.core.policy.spotwise import SpotwisePolicy
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)


def _on_demand(slack: float, work: float = 90.0, overhead: float = 1.0):
    # the job runs on on-demand, pool `a` is up at a third of the price; slack_if_launch is
    # `slack` (deadline - work - one restart)
    return obs(work=work, deadline=work + overhead + slack, overhead=overhead,
               placement=ON_DEMAND, prices={"a": 1.0}, od=3.0)  # fmt: skip


def test_ample_slack_is_worth_an_hour_of_on_demand_avoided() -> None:
    policy = SpotwisePolicy()  # prior: spot runs ~10 h, so 90 h of work needs ~9 restarts
    now = _on_demand(slack=20.0)
    per_hour = now.on_demand_price - policy._rate_cost(now, "a")
    assert policy._slack_value(now, "a") == pytest.approx(per_hour)


def test_short_slack_is_worth_what_it_still_buys_and_no_more_than_a_run() -> None:
    policy = SpotwisePolicy()
    now = _on_demand(slack=1.5)
    per_hour = now.on_demand_price - policy._rate_cost(now, "a")
    run = policy._expected_run(now, "a")
    value = policy._slack_value(now, "a")
    assert value == pytest.approx(per_hour * (now.remaining_work / run) / 1.5)
    assert per_hour < value <= per_hour * run / now.restart_overhead
    # no overhead: no restarts to pay for, slack is worth on-demand avoided as before
    free = _on_demand(slack=1.5, overhead=0.0)
    assert policy._slack_value(free, "a") == pytest.approx(
        free.on_demand_price - policy._rate_cost(free, "a")
    )


def test_on_demand_with_slack_for_one_restart_of_nine_is_not_left_for_a_gamble() -> None:
    """1 h restarts, 1.5 h of slack and 90 h of work: one interruption ends spot for good,
    so spending the restart now is worth it only with far more slack. Priced at an hour of
    on-demand per hour of slack, the job left on-demand here."""
    assert SpotwisePolicy().decide(_on_demand(slack=1.5)) == ON_DEMAND
    assert SpotwisePolicy().decide(_on_demand(slack=12.0)) == SPOT("a")
