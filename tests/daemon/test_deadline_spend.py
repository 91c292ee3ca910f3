"""A deadline policy's regret hedge counts what the daemon recorded the job paying (the price
actually paid), not its own ledger of decisions: the ledger never sees hours the daemon was
down, and the replay bench already hands the policy its real cost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session

from providers.base import EndReason
from scheduler.core.catalog import Catalog
from scheduler.core.deadline import DeadlineJob, DeadlinePlanner
from scheduler.core.jobspec import JobSpec, jobspec_from_dict
from scheduler.core.placement import PlacementContext, Requirements
from scheduler.core.policy import ON_DEMAND, SPOT
from scheduler.daemon.controllers.job.deadline_advice import deadline_job
from scheduler.daemon.controllers.spend import unaccrued_usd
from scheduler.state.models import Attempt
from tests.support.fakes import NOW, offering

SPOT_A = offering("us-east-1a", price=0.9)
SPOT_B = offering("us-east-1b", price=1.1)
OD = offering("us-east-1a", price=3.06, market="on-demand")


def _advice(spent: float | None):
    req = Requirements.from_spec(jobspec_from_dict({"name": "j", "command": ["x"]}))
    job = DeadlineJob("j", NOW, NOW + timedelta(hours=12), 10.0, 0.0, spent=spent)
    planner = DeadlinePlanner("spotwise", 0.1, 0.5)
    return planner.advise(job, req, Catalog([SPOT_A, OD]), PlacementContext(now=NOW))


def test_the_hedge_reads_the_spend_it_is_given():
    """10 h of work, none done, 12 h to go. All-on-demand is $30.91 and the margin 5% of it:
    a job that paid $5 for nothing can no longer risk a spot hour; one that paid $0 can."""
    assert _advice(0.0).action == SPOT("us-east-1a")
    assert _advice(None).action == SPOT("us-east-1a")  # the policy's own ledger: $0 so far
    paid = _advice(5.0)
    assert paid.action == ON_DEMAND
    assert paid.reason.startswith("on-demand to meet the deadline")


@pytest.mark.parametrize("down_hours", [0, 1])
def test_hours_the_daemon_missed_count_against_the_hedge(make_world, down_hours):
    """The job's spot attempt in 1a is interrupted with nothing kept; 1b has spot. All
    on-demand is $31.82, the bound 1.05x that ($33.42). With the daemon running, $0.45 was
    paid and the job goes on to spot in 1b. With the daemon stopped for an hour while the
    instance ran, the end is billed to the cloud's end time ($1.35 for no work): on-demand
    from here stays within the bound ($33.17), a launch in 1b whose 24-minute overhead
    ($0.44) is then lost would not ($33.61), so the next placement is on-demand. Before the
    daemon handed the policy its spend, its ledger had seen one tick ($0.45) either way and
    it went to spot both times."""
    w = make_world(
        offerings=[SPOT_A, SPOT_B, OD],
        policy={"deadline_policy": "spotwise", "restart_overhead": "24m"},
        reconcile_interval="30m",
    )
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="20h")
    w.tick()
    (first,) = w.attempts(jid)
    assert (first.market, first.zone) == ("spot", "us-east-1a")
    w.clock.advance(1800 + down_hours * 3600)  # passes stop while the instance runs
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    w.tick(1)
    w.tick(1)
    attempts = w.attempts(jid)
    assert attempts[0].cost_usd == pytest.approx(0.9 * (0.5 + down_hours), rel=1e-3)
    assert len(attempts) == 2
    want = ("on-demand", "us-east-1a") if down_hours else ("spot", "us-east-1b")
    assert (attempts[1].market, attempts[1].zone) == want


def test_a_running_attempt_counts_its_time_since_the_last_accrual(make_world):
    """The live attempt's unaccrued time is part of what the job paid."""
    w = make_world(
        offerings=[SPOT_A, OD],
        policy={"deadline_policy": "spotwise", "restart_overhead": "6m"},
        reconcile_interval="30m",
    )
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="12h")
    w.tick()
    (a,) = w.attempts(jid)
    with Session(w.rec.engine) as s:
        job, att = w.job(jid), s.get(Attempt, a.id)
        assert att is not None
        later = w.clock.now() + timedelta(hours=2)
        spec = JobSpec.model_validate_json(job.spec_json)
        seen = deadline_job(job, spec, later, att)
    assert unaccrued_usd(att, later) == pytest.approx(0.9 * 2, rel=1e-3)
    assert seen.spent == pytest.approx(job.cost_usd + 0.9 * 2, rel=1e-3)
    assert seen.spent > job.cost_usd
