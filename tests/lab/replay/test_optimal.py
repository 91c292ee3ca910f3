"""The omniscient DP on traces small enough to check by hand, and as a lower bound."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.policy import get_policy
from scheduler.core.policy.optimal import Grid, solve
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace, single_zone

pytestmark = pytest.mark.timeout(30)


def _dp(trace: Trace, job: Job, m: int) -> float:
    grid = Grid.make(trace.gap_hours, job.work, job.restart_overhead, job.deadline, m)
    cost, _ = solve(trace.available[None], trace.spot_price[None], trace.on_demand_price, grid)
    return float(cost[0])


def test_dp_waits_for_spot() -> None:
    # spot down at t0, up at t1,t2; 2 h of work by t=3 with no overhead: wait, spot, spot = $2
    trace = single_zone([0, 1, 1], 1.0, 1.0, 3.0)
    assert _dp(trace, Job(work=2, deadline=3, restart_overhead=0.0), m=1) == pytest.approx(2.0)


def test_dp_with_overhead_by_hand() -> None:
    # avail 1,0,1; work 2 h, deadline 3 h, overhead 0.5 h, spot $1, on-demand $3.
    # Best: spot t0 (0.5 h work, $1), on-demand t1 (0.5 h, $3), on-demand t2 (1 h, $3) = $7.
    # (All on-demand: 0.5 + 1 + 0.5 h of work = $7.5; waiting at t1 cannot finish.)
    trace = single_zone([1, 0, 1], 1.0, 1.0, 3.0)
    job = Job(work=2, deadline=3, restart_overhead=0.5)
    assert _dp(trace, job, m=2) == pytest.approx(7.0)
    policy = get_policy("optimal")
    out = simulate(trace, job, policy)
    assert policy.planned_cost == pytest.approx(7.0)
    assert out.cost == pytest.approx(7.0) and out.met_deadline


def test_dp_infeasible_is_huge() -> None:
    trace = single_zone([1, 1], 1.0, 1.0, 3.0)
    assert _dp(trace, Job(work=3, deadline=2, restart_overhead=0.0), m=1) > 1e17


def test_dp_is_a_lower_bound_and_its_plan_meets_it() -> None:
    rng = np.random.default_rng(7)
    for _ in range(8):
        n = 40
        avail = rng.random((2, n)) < rng.uniform(0.3, 0.9)
        price = rng.uniform(0.5, 1.5, (2, n)).round(2)
        trace = Trace(("us-east-1a", "us-west-2a"), 0.25, avail, price, 3.0)
        job = Job(work=6.0, deadline=10.0, restart_overhead=0.25)
        best = _dp(trace, job, m=4)
        opt = get_policy("optimal")
        planned = simulate(trace, job, opt)
        assert planned.cost == pytest.approx(best, rel=1e-9) and planned.met_deadline
        for name in ("on-demand", "greedy", "uniform-progress", "spotwise"):
            out = simulate(trace, job, get_policy(name))
            assert out.met_deadline, name
            assert out.cost >= best - 1e-9, name
