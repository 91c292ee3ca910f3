"""Property: a hard budget is never overrun by any policy + the daemon's budget rules.

Random price/availability traces, jobs, budgets and policies; the simulator applies
scheduler.core.budget (max_affordable_price before a launch, must_stop while running).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.policy import POLICY_NAMES, get_policy
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace

ZONES = ("us-east-1a", "us-east-2b", "us-west-2a")


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    z = draw(st.integers(1, 3))
    n = draw(st.integers(2, 40))
    gap = draw(st.sampled_from([0.1, 0.25, 1.0]))
    avail = np.array(draw(st.lists(st.booleans(), min_size=z * n, max_size=z * n))).reshape(z, n)
    prices = draw(st.lists(st.floats(0.05, 6.0, allow_nan=False), min_size=z * n, max_size=z * n))
    trace = Trace(ZONES[:z], gap, avail, np.array(prices).reshape(z, n), draw(st.floats(0.5, 9)))
    work = draw(st.floats(0.1, n * gap * 0.9))
    job = Job(
        work=work,
        deadline=draw(st.floats(work, n * gap)),
        restart_overhead=draw(st.sampled_from([0.0, 0.05, 0.2, 0.5])),
        checkpoint_interval=draw(st.sampled_from([0.0, 0.5, 1.0])),
        migration_cost=draw(st.sampled_from([0.0, 1.0])),
        budget=draw(st.floats(0.0, 60.0)),
    )
    return trace, job, draw(st.sampled_from(POLICY_NAMES))


@pytest.mark.timeout(60)
@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_hard_budget_never_overrun(case) -> None:  # type: ignore[no-untyped-def]
    trace, job, name = case
    out = simulate(trace, job, get_policy(name))
    assert out.cost <= job.budget + 1e-9
    assert out.finished or out.budget_stopped or not out.met_deadline
    if not out.budget_stopped:
        assert out.work_done == pytest.approx(job.work)


@pytest.mark.timeout(30)
def test_budget_stops_before_crossing() -> None:
    trace = Trace(("us-west-2a",), 1.0, np.ones((1, 20), bool), np.ones((1, 20)), 3.0)
    job = Job(work=10, deadline=20, restart_overhead=0.0, budget=3.5)
    out = simulate(trace, job, get_policy("greedy"))
    assert out.budget_stopped and not out.finished
    assert out.cost == pytest.approx(3.0)  # a 4th hour would cross $3.50
    job = Job(work=10, deadline=10.5, restart_overhead=0.0, budget=100.0)
    dry = Trace(("us-west-2a",), 1.0, np.zeros((1, 20), bool), np.ones((1, 20)), 3.0)
    out = simulate(dry, job, get_policy("on-demand"))
    assert out.finished and out.cost == pytest.approx(30.0)
