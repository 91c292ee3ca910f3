"""spotwise bridges an outage on on-demand only while the regret hedge can still pay for the
way back to spot; otherwise it waits it out (greedy's behaviour), which is never dearer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.policy import ON_DEMAND, WAIT, get_policy
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import single_zone
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(60)


def _at_reserve(spent: float):
    # 12 h job, 24 h deadline, 1 h restarts, 2 h done at t=10, spot down: slack (3 h) is
    # below spotwise's reserve but waiting is still safe; all-on-demand costs 3 x 13 = $39,
    # the hedge allows 5% of it ($1.95) above that.
    o = obs(elapsed=10, done=2, work=12, deadline=24, overhead=1.0, avail={"a": False}, od=3.0)
    return replace(o, spent=spent)


def test_bridges_the_outage_while_the_hedge_can_pay_for_the_way_back() -> None:
    # spent $2: committing now would cost $4 under all-on-demand; the margin left ($5.95)
    # pays an on-demand launch ($3) and a spot relaunch ($1)
    assert get_policy("spotwise").decide(_at_reserve(2.0)) == ON_DEMAND


def test_waits_when_a_bridge_would_commit_the_job_to_on_demand() -> None:
    # spent $5: margin left $2.95 < $3 + $1, so a bridge could never return to spot
    assert get_policy("spotwise").decide(_at_reserve(5.0)) == WAIT


def _flaky_then_long_outage_then_spot() -> list[bool]:
    """Tick 0.1 h: 3 h up (the launch and 2 h of work), two spells shorter than the 1 h
    restart, a 2.8 h outage, then spot for good."""
    runs = [(30, True), (10, False), (6, True), (9, False), (7, True), (28, False), (150, True)]
    return [ok for n, ok in runs for _ in range(n)]


def test_waits_out_the_outage_instead_of_locking_into_on_demand() -> None:
    """The rule without this check bridged at the reserve, which left the hedge no room to
    come back: 12 h on on-demand, 1.05x all-on-demand (the hedge's bound). Waiting runs the
    whole job on spot, as greedy does."""
    trace = single_zone(_flaky_then_long_outage_then_spot(), 0.1, 1.0, 3.0)
    job = Job(work=12.0, deadline=24.0, restart_overhead=1.0)
    ours = simulate(trace, job, get_policy("spotwise"))
    greedy = simulate(trace, job, get_policy("greedy"))
    assert ours.met_deadline
    assert ours.on_demand_hours == 0.0
    assert ours.cost <= greedy.cost + 0.01
    assert ours.cost < 0.5 * 3.0 * (job.work + job.restart_overhead)
