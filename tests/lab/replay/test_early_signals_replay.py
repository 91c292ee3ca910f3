"""Rebalance recommendations on the replay: moving early pays when a comparable pool is free
and the interruption is likely; it does not when the only way out is on-demand and the
signal is a false alarm. Either way moving never costs more than waiting in expectation."""

from __future__ import annotations

import numpy as np

from scheduler.core.early_signals import EarlyMoves, Signal
from scheduler.core.policy.basic import GreedyPolicy
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace

GAP = 0.25
ZONES = ("us-east-1a", "us-east-1b")
JOB = Job(work=6.0, deadline=24.0, restart_overhead=0.1, checkpoint_interval=2.0)


def _trace(avail_b: bool, a_down_at: int | None, n: int = 96) -> Trace:
    avail = np.ones((2, n), bool)
    avail[1, :] = avail_b
    if a_down_at is not None:
        avail[0, a_down_at:] = False
    return Trace(ZONES, GAP, avail, np.ones((2, n)), 3.0)


def test_a_rebalance_that_pays_to_act_on() -> None:
    """Zone b is as cheap as a; a is taken back an hour after its signal."""
    trace = _trace(avail_b=True, a_down_at=12)
    signals = {8: frozenset({"us-east-1a"})}
    base = simulate(trace, JOB, GreedyPolicy(), early_signals=signals)
    early = EarlyMoves(GreedyPolicy(), Signal(interrupt_probability=0.9, lead_hours=1.0))
    moved = simulate(trace, JOB, early, early_signals=signals)
    assert early.moves == 1 and early.waits == 0
    assert base.interruptions == 1 and moved.interruptions == 0
    assert base.lost_work > 0 and moved.lost_work == 0
    assert moved.cost < base.cost and moved.finish_time < base.finish_time


def test_a_rebalance_that_does_not_pay() -> None:
    """The only way out is on-demand at 3x, and the signal is a false alarm: waiting is
    cheaper in expectation, and it is what the job does (the cost is the base run's)."""
    trace = _trace(avail_b=False, a_down_at=None)
    signals = {8: frozenset({"us-east-1a"})}
    base = simulate(trace, JOB, GreedyPolicy(), early_signals=signals)
    early = EarlyMoves(GreedyPolicy(), Signal(interrupt_probability=0.3, lead_hours=1.0))
    stayed = simulate(trace, JOB, early, early_signals=signals)
    assert early.moves == 0 and early.waits == 1
    assert stayed.cost == base.cost and stayed.early_saves == 1
    # Had it moved regardless (a signal taken as certain), it would have paid more.
    eager = EarlyMoves(GreedyPolicy(), Signal(interrupt_probability=1.0, lead_hours=1.0))
    forced = simulate(trace, JOB, eager, early_signals=signals)
    assert eager.moves == 1 and forced.cost > base.cost


def test_periodic_checkpoints_cost_time_and_interruptions_cost_the_work_since():
    """The replay charges each checkpoint's save time and loses the work since the last one,
    so neither a very short nor a very long interval is free."""
    avail = np.ones((1, 96), bool)
    avail[0, 30] = False  # one interruption, 7.5 h in
    trace = Trace(ZONES[:1], GAP, avail, np.ones((1, 96)), 3.0)

    def run(interval: float):  # type: ignore[no-untyped-def]
        job = Job(work=10.0, deadline=24.0, restart_overhead=0.1,
                  checkpoint_interval=interval, save_hours=0.05)  # fmt: skip
        return simulate(trace, job, GreedyPolicy())

    short, mid, long = run(0.25), run(1.0), run(4.0)
    assert long.lost_work > max(short.lost_work, mid.lost_work)
    assert short.cost > mid.cost and long.cost > mid.cost  # saving vs redoing: a middle wins
    free = simulate(trace, Job(10.0, 24.0, 0.1, 0.25), GreedyPolicy())
    assert short.cost > free.cost  # the same interval without save time is cheaper
