"""The replace-one path in the replay: a gang's single-node loss replaced in place (billed, no
progress, the placement kept) against the same loss re-placing the gang; the same draws for
both, and the deadline bench's gang setting unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.policy import SPOT
from scheduler.lab.replay import bench_settings
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace, gang_losses, gang_trace, single_zone
from tests.support.replay import Scripted

pytestmark = pytest.mark.timeout(60)


def test_a_node_loss_is_replaced_in_place_billed_without_progress() -> None:
    trace = single_zone([1] * 10, 1.0, 2.0, 6.0)  # a gang of 2: 2 x the price already
    losses = np.zeros((1, 10), dtype=bool)
    losses[0, 2] = True  # tick 2: one node is taken back on its own
    job = Job(work=4, deadline=10, restart_overhead=0.5, checkpoint_interval=1.0)
    policy = Scripted([SPOT("z0")])
    out = simulate(trace, job, policy, node_losses=losses)
    # Launch (0.5 h) + 1.5 h of work by tick 2, checkpoint at 1.0: 0.5 h lost; the
    # replacement boots 0.5 h while the other node waits, both billed; then 3 h more.
    assert out.replacements == 1 and out.interruptions == 0 and out.launches == 1
    assert out.lost_work == pytest.approx(0.5)
    assert out.finish_time == pytest.approx(0.5 + 1.5 + 0.5 + 3.0)
    assert out.cost == pytest.approx(2.0 * out.finish_time)
    assert all(o.placement is not None for o in policy.seen[3:])  # never re-placed
    # The same loss as a tick without capacity re-places the gang: a launch more.
    whole = Trace(trace.zones, 1.0, trace.available & ~losses, trace.spot_price,
                  trace.on_demand_price, trace.regions)  # fmt: skip
    again = simulate(whole, job, Scripted([SPOT("z0")]))
    assert again.interruptions == 1 and again.replacements == 0 and again.launches == 2


def test_gang_trace_is_the_gang_losses_applied_so_the_bench_setting_is_unchanged() -> None:
    base = bench_settings.v100_2023().select(("us-west-2a", "us-east-1a"))
    priced, losses = gang_losses(base, 4, seed=4)
    g = gang_trace(base, 4, seed=4)
    assert np.array_equal(g.available, priced.available & ~losses)
    assert np.array_equal(priced.available, base.available)
    assert np.allclose(priced.spot_price, 4 * base.spot_price)
    assert losses.any() and not (losses & ~base.available.astype(bool)).any()
