"""Simulator accounting: restart overhead, lost work, billing, misses, migrations."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.policy import ON_DEMAND, SPOT, WAIT, get_policy
from scheduler.lab.replay.sim import Job, simulate
from scheduler.lab.replay.trace import Trace, single_zone
from tests.support.replay import Scripted

pytestmark = pytest.mark.timeout(30)


def test_restart_overhead_is_billed_without_progress() -> None:
    trace = single_zone([1] * 10, 1.0, 1.0, 3.0)
    out = simulate(trace, Job(work=3, deadline=10, restart_overhead=0.5), Scripted([SPOT("z0")]))
    assert out.finished and out.met_deadline
    assert out.finish_time == pytest.approx(3.5)  # 0.5 h overhead + 3 h of work
    assert out.cost == pytest.approx(3.5)  # the last tick is billed only until done
    assert out.launches == 1 and out.interruptions == 0


def test_on_demand_cost() -> None:
    trace = single_zone([0] * 10, 1.0, 1.0, 3.0)
    out = simulate(trace, Job(work=4, deadline=10, restart_overhead=0.25), get_policy("on-demand"))
    assert out.cost == pytest.approx(4.25 * 3.0)
    assert out.on_demand_hours == pytest.approx(4.25) and out.spot_hours == 0


def test_interruption_loses_work_since_checkpoint() -> None:
    trace = single_zone([1, 1, 1, 0, 1, 1, 1, 1, 1], 1.0, 1.0, 3.0)
    job = Job(work=4, deadline=9, restart_overhead=0.0, checkpoint_interval=2.0)
    policy = Scripted([SPOT("z0")])
    out = simulate(trace, job, policy)
    assert out.interruptions == 1 and out.lost_work == pytest.approx(1.0)  # 3 done, ckpt at 2
    assert out.failed_launches == 1  # tick 3: the zone is down
    assert policy.seen[3].placement is None and policy.seen[3].work_done == pytest.approx(2.0)
    assert out.cost == pytest.approx(5.0) and out.finish_time == pytest.approx(6.0)


def test_checkpoint_on_notice_loses_nothing() -> None:
    trace = single_zone([1, 1, 1, 0, 1, 1], 1.0, 1.0, 3.0)
    out = simulate(trace, Job(work=4, deadline=6, restart_overhead=0.0), Scripted([SPOT("z0")]))
    assert out.lost_work == 0 and out.finish_time == pytest.approx(5.0)


def test_billing_follows_the_price_in_force() -> None:
    trace = single_zone([1, 1, 1], 1.0, [1.0, 2.0, 3.0], 9.0)
    out = simulate(trace, Job(work=3, deadline=3, restart_overhead=0.0), Scripted([SPOT("z0")]))
    assert out.cost == pytest.approx(6.0)


def test_switching_pays_the_overhead_again() -> None:
    trace = single_zone([1] * 6, 1.0, 1.0, 3.0)
    policy = Scripted([SPOT("z0"), ON_DEMAND])
    out = simulate(trace, Job(work=2, deadline=6, restart_overhead=0.5), policy)
    # tick0 spot: 0.5 oh + 0.5 work ($1); tick1 on-demand: 0.5 oh + 0.5 work ($3);
    # tick2 on-demand: the last 1.0 ($3)
    assert out.launches == 2 and out.cost == pytest.approx(7.0)
    assert out.finish_time == pytest.approx(3.0)


def test_missed_deadline_is_finished_on_demand() -> None:
    trace = single_zone([0] * 4, 1.0, 1.0, 3.0)
    out = simulate(trace, Job(work=2, deadline=3, restart_overhead=0.5), Scripted([WAIT]))
    assert not out.met_deadline
    assert out.late_cost == pytest.approx((2 + 0.5) * 3.0) and out.cost == out.late_cost


def test_migration_between_regions() -> None:
    zones = ("us-east-1a", "us-west-2a")
    trace = Trace(zones, 1.0, np.ones((2, 6), bool), np.ones((2, 6)), 3.0)
    policy = Scripted([SPOT("us-east-1a"), SPOT("us-west-2a")])
    out = simulate(trace, Job(work=3, deadline=6, restart_overhead=0.0, migration_cost=1.0), policy)
    assert out.migrations == 1 and out.cost == pytest.approx(3.0 + 1.0)
    assert policy.seen[1].migration_cost == {"us-west-2a": 1.0}


def test_unknown_zone_is_an_error() -> None:
    trace = single_zone([1, 1], 1.0, 1.0, 3.0)
    with pytest.raises(ValueError, match="unknown zone"):
        simulate(trace, Job(2, 2, 0.0), Scripted([SPOT("nowhere")]))
