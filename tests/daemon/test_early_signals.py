"""Early signals in the daemon: a rebalance recommendation from the cloud (or from the
trainer through its store) is recorded once, raises its pool's hazard, and moves the job
only when moving costs no more than waiting; a notice the trainer saw is learned from the
store for every cloud."""

from __future__ import annotations

import json

from scheduler.core.states import AttemptEnd, AttemptState
from tests.support.fakes import offering

POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
POOL_B = "aws/us-east-1b/p3.2xlarge/spot"


def _world(make_world, b_price: float | None):  # type: ignore[no-untyped-def]
    w = make_world()
    offers = [
        offering("us-east-1a", price=1.0),
        offering("us-east-1a", price=3.06, market="on-demand"),
    ]
    if b_price is not None:
        offers.append(offering("us-east-1b", price=b_price))
    w.provider.set_offerings(offers)
    w.rec.poll_prices()
    jid = w.submit(gpus="V100:1", gpu_hours=10)
    w.tick()
    (a,) = w.attempts(jid)
    assert a.pool == POOL_A and a.state is AttemptState.RUNNING
    return w, jid, a


def test_a_rebalance_with_a_comparable_pool_moves_the_job_before_the_notice(make_world):
    w, jid, a = _world(make_world, b_price=1.0)
    w.tick(600)
    w.provider.early_signal(a.instance_id)
    w.tick(30, n=6)
    attempts = w.attempts(jid)
    assert attempts[0].early_signal_at is not None and attempts[0].early_action == "moved"
    assert attempts[0].stop_reason == "rebalance"
    assert attempts[0].end_reason is AttemptEnd.MIGRATED
    assert attempts[-1].pool == POOL_B and attempts[-1].state is AttemptState.RUNNING
    assert len(w.events("early_signal")) == 1
    (move,) = w.events("early_move")
    assert POOL_B in move.message and "waiting" in move.message
    assert w.job(jid).recoveries == 0


def test_a_rebalance_with_only_on_demand_to_go_to_waits_and_says_why(make_world):
    w, jid, a = _world(make_world, b_price=None)
    w.tick(600)
    w.provider.early_signal(a.instance_id)
    w.tick(30, n=4)
    (only,) = w.attempts(jid)
    assert only.state is AttemptState.RUNNING and only.early_action == "waited"
    assert only.stop_reason is None
    (wait,) = w.events("early_wait")  # decided once, not at every pass
    assert "it stays" in wait.message
    assert not w.events("early_move")


def test_a_pool_with_a_recent_signal_is_riskier_for_the_next_placement(make_world):
    """While a rebalance stands on pool A, a second job goes to B at the same price."""
    w, _, a = _world(make_world, b_price=1.0)
    w.provider.early_signal(a.instance_id)
    w.tick(30)
    other = w.submit(gpus="V100:1", gpu_hours=10, name="second")
    w.tick(30, n=2)
    assert w.attempts(other)[0].pool == POOL_B


def test_the_notice_and_early_signal_the_trainer_wrote_reach_the_attempt(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    ckpt = w.tmp / "ckpt" / jid
    ckpt.mkdir(parents=True, exist_ok=True)
    doc = {"step": 5, "total_steps": 100, "state": "noticed",
           "notice": {"source": "gcp", "seen_at": 1.0, "deadline": 151.0}}  # fmt: skip
    (ckpt / "progress.json").write_text(json.dumps(doc))
    w.tick(30)
    (a,) = w.attempts(jid)
    assert a.notice_at is not None
    (ev,) = w.events("interruption_notice")
    assert "gcp" in ev.message
    w.tick(30)
    assert len(w.events("interruption_notice")) == 1
