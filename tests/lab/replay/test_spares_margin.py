"""While the regret hedge's margin left pays for only a few failed launches, spotwise
launches from idle only into a spell that has already lasted part of a restart
(SpotwisePolicy._spares_margin): launching into every flicker spent the margin and the hedge
then held the job on on-demand for good."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scheduler.core.policy import ON_DEMAND, SPOT, WAIT
from scheduler.core.policy import spotwise as sw
from scheduler.core.policy.safety import HEDGE_MARGIN, hedge_allows_spot, hedge_margin
from scheduler.core.policy.spotwise import SpotwisePolicy
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)

OD, OVERHEAD, WORK = 3.0, 1.0, 24.0


def _idle(
    up_for: float,
    spent: float,
    slack: float = 20.0,
    overhead: float = OVERHEAD,
    price: float = 1.0,
):
    """Idle at elapsed 0 with pool `a` (`price` $/h) up for `up_for` hours, `spent` USD so
    far, on 24 h of work."""
    policy = SpotwisePolicy()
    policy.model.update(-5.0, {"a": False})
    policy.model.update(-up_for, {"a": True}, {"a": price})
    now = obs(work=WORK, deadline=WORK + overhead + slack, overhead=overhead,
              avail={"a": True}, prices={"a": price}, od=OD)  # fmt: skip
    now = replace(now, spent=spent)
    policy.observe(now)
    return policy, now


def test_a_young_spell_is_waited_on_only_while_the_margin_pays_for_few_failed_launches() -> None:
    _, now = _idle(up_for=0.1, spent=0.0)
    # the whole margin ($3.75) pays for under four failed $1 launches: too few
    assert hedge_margin(now) < sw.MARGIN_LAUNCHES * 1.0 * OVERHEAD
    assert SpotwisePolicy.decide(*_idle(up_for=0.1, spent=0.0)) == WAIT
    # the operator is told why a job waits while spot is up
    policy, now = _idle(up_for=0.1, spent=0.0)
    policy.decide(now)
    assert policy.wait_reason() == (
        "waiting for spot in a to stay up 30 min, up 6 min so far (cost-guard margin low)"
    )
    # the spell has lasted half a restart: launch
    assert SpotwisePolicy.decide(*_idle(up_for=0.5, spent=0.0)) == SPOT("a")
    # a pool at $0.20/h: the margin pays for more than MARGIN_LAUNCHES failed launches
    assert hedge_margin(now) > sw.MARGIN_LAUNCHES * 0.2 * OVERHEAD
    assert SpotwisePolicy.decide(*_idle(up_for=0.1, spent=0.0, price=0.2)) == SPOT("a")
    # ... until the job has spent most of it
    spent = hedge_margin(now) - 2.0
    assert SpotwisePolicy.decide(*_idle(up_for=0.1, spent=spent, price=0.2)) == WAIT


def test_a_spell_already_under_way_at_the_first_look_is_launched_into() -> None:
    """Its age is unknown (in the bench, with a week of history, such a spell is older than
    the week): the daemon's new job launches as it did before the rule."""
    policy = SpotwisePolicy()
    now = obs(work=WORK, deadline=WORK + OVERHEAD + 20.0, overhead=OVERHEAD, od=OD)
    policy.observe(now)
    assert not policy.model.saw_begin("a")
    assert hedge_margin(now) < sw.MARGIN_LAUNCHES * 1.0 * OVERHEAD
    assert policy.decide(now) == SPOT("a")


def test_no_wait_for_a_launch_the_hedge_refuses_anyway() -> None:
    """With less margin left than one failed launch, the hedge allows no spot however long
    the spell lasts: waiting would only burn slack (and promise spot in the status)."""
    _, now = _idle(up_for=0.1, spent=0.0)
    policy, now = _idle(up_for=0.1, spent=hedge_margin(now) - 0.5)
    assert not hedge_allows_spot(now, "a", now.spent or 0.0)
    assert policy.decide(now) == ON_DEMAND


def test_at_the_reserve_or_without_overhead_it_launches_whatever_the_spell() -> None:
    policy, now = _idle(up_for=0.1, spent=0.0, slack=1.5)
    assert now.slack_if_launch - now.tick_hours < policy._reserve(now)
    assert policy.decide(now) == SPOT("a")
    # no overhead: a launch cannot die inside it (the margin left pays for fewer than
    # MARGIN_LAUNCHES failed ticks, so only the spell's age could make it wait)
    _, now = _idle(up_for=0.0, spent=0.0, overhead=0.0)
    spent = hedge_margin(now) - 0.6
    assert sw.MARGIN_LAUNCHES * 1.0 * now.tick_hours > 0.6
    assert SpotwisePolicy.decide(*_idle(up_for=0.0, spent=spent, overhead=0.0)) == SPOT("a")


def test_a_wait_for_another_reason_keeps_the_usual_words() -> None:
    policy, now = _idle(up_for=0.1, spent=0.0)
    assert policy.decide(now) == WAIT
    assert "cost-guard margin low" in policy.wait_reason()
    down = replace(now, spot_available={"a": False}, elapsed=0.1, deadline=now.deadline + 20.0)
    policy.observe(down)
    assert policy.decide(down) == WAIT
    assert policy.wait_reason() == "waiting for cheaper spot capacity"


def _flaky_then_calm() -> Trace:
    """Pool `a` at $1/h (on-demand $3/h), 0.1 h ticks: 10 h of spells of 0.3 h (a 1 h
    launch never finishes inside one), then up for good."""
    n = 500
    up = np.ones(n, bool)
    for i in range(100):
        up[i] = i % 5 < 3
    return Trace(("us-west-2a",), 0.1, up[None, :], np.ones((1, n)), OD)


def test_in_a_flaky_stretch_the_margin_outlasts_it_and_the_job_finishes_on_spot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = Job(WORK, 2.0 * WORK, OVERHEAD)
    trace = _flaky_then_calm()
    kept = simulate(trace, job, SpotwisePolicy())
    monkeypatch.setattr(sw, "MARGIN_LAUNCHES", 0.0)  # the rule off
    spent = simulate(trace, job, SpotwisePolicy())
    assert kept.met_deadline and spent.met_deadline
    # without the rule the flickers use the margin up and the hedge holds the job on
    # on-demand; with it the job waits them out and runs the calm part on spot
    assert spent.on_demand_hours > WORK / 2
    assert kept.on_demand_hours == 0.0
    assert kept.cost < 0.5 * spent.cost
    # both within the hedge's bound
    assert max(kept.cost, spent.cost) <= (1.0 + HEDGE_MARGIN) * OD * (WORK + OVERHEAD) + 1e-6
