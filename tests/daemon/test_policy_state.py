"""A deadline job's policy keeps what it learned across daemon restarts and reloads."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session

from scheduler.core.deadline import DeadlinePlanner
from scheduler.core.policy import SPOT
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.models import PolicyState
from tests.support.fakes import offering

OD = offering("us-east-1a", price=3.06, market="on-demand")


def _learn(w, jid: str) -> None:
    """Zone 1b comes and goes while the job runs in 1a: the policy learns 1b is flaky."""
    a = offering("us-east-1a", price=0.9)
    b = offering("us-east-1b", price=0.8)
    for i in range(8):
        w.provider.set_offerings([a, OD] + ([b] if i % 2 else []))
        w.rec.poll_prices()
        w.tick(1800)


def _model(planner: DeadlinePlanner, jid: str):
    return planner._policies[jid].model


@pytest.mark.slow
def test_learned_availability_survives_a_restart(make_world):
    w = make_world(policy={"deadline_policy": "spotwise"}, reconcile_interval="30m")
    jid = w.submit(gpus="V100:1", gpu_hours=20, deadline="60h")
    w.tick()
    _learn(w, jid)
    old = w.rec.planner
    learned = _model(old, jid)
    assert learned.pools["us-east-1b"].losses > 0
    with Session(w.rec.engine) as s:
        row = s.get(PolicyState, jid)
    assert row is not None and row.policy == "spotwise"
    assert json.loads(row.state_json) == old.state(jid)

    # A new daemon over the same database: the first advice restores the learned state.
    w.rec = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock)
    w.rec.poll_prices()
    assert not w.rec.planner.knows(jid)
    w.tick(0)
    new = w.rec.planner
    assert new is not old and new.knows(jid)
    got = _model(new, jid)
    assert got.rates("us-east-1b") == learned.rates("us-east-1b")
    assert got.rates("us-east-1a") == learned.rates("us-east-1a")
    assert got.last_time == learned.last_time
    # and the outage lengths behind outage_left, with the decay and the current spell
    assert learned.pools["us-east-1b"].outages
    # and the last price seen (the daemon shows a pool without capacity unpriced)
    assert learned.pools["us-east-1b"].price == pytest.approx(0.8)
    assert got.pools == learned.pools


@pytest.mark.slow
def test_hours_the_daemon_was_down_do_not_count_into_a_spell_s_age(make_world):
    """Nobody watched the pools while the daemon was down: after a restart the current
    spell's age starts at the next look (the learned rates and outages are kept)."""
    w = make_world(policy={"deadline_policy": "spotwise"}, reconcile_interval="30m")
    jid = w.submit(gpus="V100:1", gpu_hours=20, deadline="60h")
    w.tick()
    _learn(w, jid)
    learned = _model(w.rec.planner, jid)
    assert learned.spell_age("us-east-1a") >= 3.0 and learned.saw_begin("us-east-1a") is False
    assert learned.saw_begin("us-east-1b")
    w.clock.advance(3 * 3600)  # the daemon is down for 3 h
    w.rec = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock)
    w.rec.poll_prices()
    w.tick(0)
    got = _model(w.rec.planner, jid)
    for zone in ("us-east-1a", "us-east-1b"):
        assert not got.saw_begin(zone)
        assert got.pools[zone].outages == learned.pools[zone].outages  # kept
    assert got.pools["us-east-1b"].losses > 0  # kept (decayed by the 3 h, as any 3 h)
    assert got.spell_age("us-east-1a") == 0.0


def test_restored_planner_gives_the_same_advice():
    from datetime import timedelta

    from scheduler.core.catalog import Catalog
    from scheduler.core.deadline import DeadlineJob
    from scheduler.core.jobspec import jobspec_from_dict
    from scheduler.core.placement import PlacementContext, Requirements
    from tests.support.fakes import NOW

    req = Requirements.from_spec(jobspec_from_dict({"name": "j", "command": ["x"]}))
    job = DeadlineJob("j", NOW, NOW + timedelta(hours=30), 10.0, 0.0)
    a, b = offering("us-east-1a", price=0.9), offering("us-east-1b", price=0.8)
    old = DeadlinePlanner("spotwise", 0.1, 0.5)
    for i in range(12):
        cat = Catalog([a, OD] + ([b] if i % 3 else []))
        ctx = PlacementContext(now=NOW + timedelta(hours=i / 2))
        old.advise(job, req, cat, ctx, current=SPOT("us-east-1a"))
    new = DeadlinePlanner("spotwise", 0.1, 0.5)
    new.restore("j", json.loads(json.dumps(old.state("j"))))
    cold = DeadlinePlanner("spotwise", 0.1, 0.5)
    for i in range(12, 20):
        cat = Catalog([a, OD] + ([b] if i % 3 else []))
        ctx = PlacementContext(now=NOW + timedelta(hours=i / 2))
        want = old.advise(job, req, cat, ctx, current=SPOT("us-east-1a"))
        got = new.advise(job, req, cat, ctx, current=SPOT("us-east-1a"))
        cold.advise(job, req, cat, ctx, current=SPOT("us-east-1a"))
        assert (got.action, got.reason) == (want.action, want.reason)
    assert new.state("j") == old.state("j")
    assert cold.state("j") != old.state("j")  # a cold policy would have learned less


@pytest.mark.slow
def test_another_policy_starts_cold(make_world):
    w = make_world(policy={"deadline_policy": "spotwise"}, reconcile_interval="30m")
    jid = w.submit(gpus="V100:1", gpu_hours=20, deadline="60h")
    w.tick()
    _learn(w, jid)
    cfg = w.rec.config.model_copy(
        update={"policy": w.rec.config.policy.model_copy(update={"deadline_policy": "greedy"})}
    )
    w.rec.config = cfg  # a SIGHUP that changes the policy
    w.tick(0)
    with Session(w.rec.engine) as s:
        assert s.get(PolicyState, jid).policy == "greedy"


@pytest.mark.slow
def test_a_new_job_starts_from_what_the_daemon_learned_of_its_shape(make_world):
    w = make_world(policy={"deadline_policy": "spotwise"}, reconcile_interval="30m")
    first = w.submit(name="first", gpus="V100:1", gpu_hours=20, deadline="60h")
    w.tick()
    _learn(w, first)
    learned = _model(w.rec.planner, first).pools["us-east-1b"]
    second = w.submit(name="second", gpus="V100:1", gpu_hours=20, deadline="60h")
    w.tick(0)
    warm = _model(w.rec.planner, second).pools["us-east-1b"]
    assert (warm.losses, warm.up_hours) == (learned.losses, learned.up_hours)
    # the outages learned carry over; when the current spell began is the other job's clock
    assert warm.outages == learned.outages and learned.since is not None
    assert not warm.since_seen  # its age counts from its first sight by this job
