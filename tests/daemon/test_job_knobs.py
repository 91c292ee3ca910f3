"""The knobs users ask peers for: a wall-clock cap (`max_duration`), no recovery
(`max_preemptions = 0`), on-demand after repeated interruptions (`fallback_after`), and a
pool's "avoid after interrupt" learned from its outages."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session

from providers.base import EndReason
from scheduler.core import hazard
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state.models import PoolState
from tests.support.fakes import offering

POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
OD = offering("us-east-1a", price=3.06, market="on-demand")


def _interrupt(w, jid):  # type: ignore[no-untyped-def]
    live = [a for a in w.attempts(jid) if a.state is AttemptState.RUNNING]
    assert live, [(a.pool, a.state) for a in w.attempts(jid)]
    w.provider.end(live[-1].instance_id, EndReason.INTERRUPTED)


def test_max_preemptions_zero_means_no_recovery(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1", max_preemptions=0)
    w.tick()
    _interrupt(w, jid)
    w.tick(30, n=3)
    job = w.job(jid)
    assert job.state is JobState.FAILED and "max_preemptions = 0: no recovery" in job.reason
    assert len(w.attempts(jid)) == 1


def test_a_job_without_the_key_recovers_as_the_daemon_says(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    _interrupt(w, jid)
    w.tick(30, n=3)
    assert w.job(jid).state in (JobState.RECOVERING, JobState.LAUNCHING, JobState.RUNNING)


def test_max_duration_stops_the_job_and_fails_it(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1", max_duration="1h")
    w.tick()
    w.tick(1800)
    assert w.attempts(jid)[0].stop_requested_at is None  # half an hour in: runs on
    w.tick(1900)
    (a,) = w.attempts(jid)
    assert a.stop_reason == "max_duration"
    w.tick(30, n=4)
    (a,) = w.attempts(jid)
    assert a.end_reason is AttemptEnd.FAILED
    job = w.job(jid)
    assert job.state is JobState.FAILED and "max_duration" in job.reason
    (ev,) = w.events("max_duration")
    assert "1:00:00" in ev.message


def test_fallback_after_runs_the_rest_on_on_demand(make_world):
    w = make_world(offerings=[offering("us-east-1a", price=1.0), offering("us-east-1b"), OD])
    jid = w.submit(gpus="V100:1", fallback_after=2, fallback_window="6h")
    w.tick()
    for _ in range(2):
        _interrupt(w, jid)
        w.tick(30, n=3)
        w.tick(2400, n=1)  # past avoid_after_interrupt: spot pools are fair game again
    attempts = w.attempts(jid)
    assert [a.market for a in attempts[:2]] == ["spot", "spot"]
    assert attempts[-1].market == "on-demand"
    assert "fallback_after" in w.job(jid).reason or any(
        "fallback_after" in e.message for e in w.events()
    )


def test_fallback_after_needs_a_job_without_a_deadline():
    from scheduler.core.errors import UserError
    from scheduler.core.jobspec import jobspec_from_dict

    with pytest.raises(UserError, match="without a deadline"):
        jobspec_from_dict(
            {"name": "j", "command": ["x"], "fallback_after": 2, "deadline": "5h", "gpu_hours": 1}
        )


def test_the_avoid_time_is_learned_from_the_pools_outages(make_world):
    """Pool A's outages last about six minutes: a job interrupted there returns after ten
    minutes, not after the configured thirty (pool B costs more)."""
    w = make_world(offerings=[offering("us-east-1a", price=1.0), offering("us-east-1b", price=1.5)])
    with Session(w.rec.engine) as s:
        s.add(PoolState(pool=POOL_A, outage_hours=json.dumps([0.1, 0.1, 0.12])))
        s.commit()
    jid = w.submit(gpus="V100:1")
    w.tick()
    _interrupt(w, jid)
    w.tick(30, n=3)
    assert w.attempts(jid)[-1].pool != POOL_A
    _interrupt(w, jid)
    w.tick(600)
    w.tick(30, n=3)
    assert w.attempts(jid)[-1].pool == POOL_A


def test_an_outage_is_measured_from_the_interruption_to_the_next_run_there(make_world):
    w = make_world(offerings=[offering("us-east-1a", price=1.0)])
    jid = w.submit(gpus="V100:1")
    w.tick()
    _interrupt(w, jid)
    w.tick(30)
    with Session(w.rec.engine) as s:
        ps = s.get(PoolState, POOL_A)
        assert ps is not None and ps.outage_since is not None
    w.tick(1900, n=1)
    w.tick(30, n=3)
    with Session(w.rec.engine) as s:
        ps = s.get(PoolState, POOL_A)
        assert ps is not None and ps.outage_since is None
        (h,) = json.loads(ps.outage_hours)
        assert 0.5 < h < 0.7


def test_avoid_hours_needs_a_few_outages_and_stays_within_bounds():
    assert hazard.avoid_hours([0.1, 0.1], 0.5) == 0.5
    assert hazard.avoid_hours([0.1, 0.2, 0.3], 0.5) == pytest.approx(0.2)
    assert hazard.avoid_hours([0.0, 0.0, 0.0], 0.5) == pytest.approx(hazard.AVOID_FLOOR_HOURS)
    assert hazard.avoid_hours([100.0] * 5, 0.5) == hazard.AVOID_CAP_HOURS


def test_a_job_waiting_past_max_duration_is_not_launched_again(make_world):
    w = make_world(offerings=[offering("us-east-1a", price=1.0)])
    jid = w.submit(gpus="V100:1", max_duration="1h")
    w.tick()
    _interrupt(w, jid)
    w.tick(30)
    w.provider.set_offerings([])  # nothing to run on while the hour passes
    w.rec.poll_prices()
    w.tick(3700)
    w.provider.set_offerings([offering("us-east-1a", price=1.0)])
    w.rec.poll_prices()
    w.tick(30, n=2)
    job = w.job(jid)
    assert job.state is JobState.FAILED and "max_duration" in job.reason
    assert len(w.attempts(jid)) == 1
