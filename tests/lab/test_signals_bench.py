"""The replay benchmarks' stand-in prior looks only at each trace's past, and both benchmarks
run on small windows (the full run is scripts/bench_early_signals.py)."""

from __future__ import annotations

import numpy as np

from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace
from scheduler.lab.signals_bench import ExpectedCostGreedy, stand_in_rates

ZONES = ("us-east-1a", "us-east-1b")


def _trace(n: int = 400) -> Trace:
    avail = np.ones((2, n), bool)
    avail[1, ::8] = False  # us-east-1b flaps every two hours
    return Trace(ZONES, 0.25, avail, np.ones((2, n)), 3.0)


def test_the_stand_in_prior_uses_only_the_past():
    t = _trace()
    start = 300
    rates = stand_in_rates(t, start)
    assert rates["us-east-1b"] > rates["us-east-1a"]
    future = t.available.copy()
    future[0, start:] = False  # whatever happens after the start
    changed = Trace(ZONES, 0.25, future, t.spot_price, 3.0)
    assert stand_in_rates(changed, start) == rates


def test_a_prior_steers_a_cold_job_to_the_quieter_pool():
    avail = np.ones((2, 100), bool)
    avail[0, 3::8] = False  # us-east-1a, first by name, flaps every two hours
    t = Trace(ZONES, 0.25, avail, np.ones((2, 100)), 3.0)
    job = Job(work=6.0, deadline=20.0, restart_overhead=0.1, checkpoint_interval=0.5)
    cold = simulate(t, job, ExpectedCostGreedy(None))  # alike: the first by name
    warm = simulate(t, job, ExpectedCostGreedy({"us-east-1a": 0.5, "us-east-1b": 0.02}))
    assert cold.interruptions > 0 and warm.interruptions == 0 and warm.cost < cold.cost
