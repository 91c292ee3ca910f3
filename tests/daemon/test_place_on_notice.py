"""A notice on a running single-node attempt places the job's next attempt at once, while the
old instance still saves; the new attempt's store claim waits until the old one has ended or
its notice window has passed, survives a restart, and the old attempt counts as one
interruption."""

from __future__ import annotations

import json

import pytest

from providers.base import EndReason, FailureKind, LaunchFailure, NotPermitted
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from tests.support.fakes import offering
from trainer import contract

POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
POOL_B = "aws/us-east-1b/p3.2xlarge/spot"
MISSING = "ec2:RunInstances on arn:aws:ec2:us-east-1:1:instance/*"


def _owner(w, jid: str) -> int | None:  # type: ignore[no-untyped-def]
    text = (w.tmp / "ckpt" / jid / contract.OWNER).read_text()
    return contract.owner_attempt(text)


def _running(make_world, **spec):  # type: ignore[no-untyped-def]
    w = make_world()
    spec.setdefault("place_on_notice", True)
    jid = w.submit(gpus="V100:1", gpu_hours=10, **spec)
    w.tick()
    (a,) = w.attempts(jid)
    assert a.pool == POOL_A and a.state is AttemptState.RUNNING and _owner(w, jid) == 1
    w.tick(60)
    return w, jid, a


def test_a_notice_places_the_next_attempt_while_the_old_one_saves(make_world):
    w, jid, a = _running(make_world)
    w.provider.notice(a.instance_id)
    w.tick(5)
    old, new = w.attempts(jid)
    # Placed and launched at once, away from the noticed pool, while the old one is live.
    assert old.state is AttemptState.RUNNING and old.notice_at is not None
    assert new.replaces == old.id and new.pool == POOL_B
    assert new.state in (AttemptState.LAUNCHING, AttemptState.RUNNING)
    assert new.claim_pending and _owner(w, jid) == 1  # the old trainer may still save
    env = w.provider.last_request.env
    assert float(env[contract.ENV_CLAIM_WAIT]) >= 120  # the notice window and a margin
    assert w.job(jid).recoveries == 0
    w.tick(5, n=3)
    assert _owner(w, jid) == 1 and w.attempts(jid)[1].claim_pending  # not before it ends
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)  # saved, then taken back
    w.tick(5)
    old, new = w.attempts(jid)
    assert old.end_reason is AttemptEnd.INTERRUPTED
    assert _owner(w, jid) == 2 and not new.claim_pending
    (ev,) = w.events("store_handed_over")
    assert "has ended" in ev.message and ev.attempt_id == new.id
    job = w.job(jid)
    assert job.state is JobState.RUNNING and job.recoveries == 1 and job.settled_attempt == old.id
    w.tick(5, n=3)
    assert w.job(jid).recoveries == 1 and len(w.attempts(jid)) == 2  # counted once
    # The new attempt ends: settled by the ordinary path, the old one not counted again.
    w.provider.end(new.instance_id, EndReason.INTERRUPTED)
    w.tick(5, n=2)
    assert w.job(jid).recoveries == 2


def test_the_claim_is_written_once_the_notice_window_passes(make_world):
    w, jid, a = _running(make_world)
    w.provider.notice(a.instance_id)
    w.tick(5)
    assert _owner(w, jid) == 1
    w.tick(60, n=2)  # 125 s since the notice: inside 120 s + 30 s handover_grace
    assert _owner(w, jid) == 1
    w.tick(30)  # past it: the old attempt is not seen to end, but cannot still be saving
    assert _owner(w, jid) == 2
    (ev,) = w.events("store_handed_over")
    assert "notice window has passed" in ev.message


def test_a_restart_between_placement_and_end_loses_no_claim(make_world, tmp_path):
    w, jid, a = _running(make_world)
    w.provider.notice(a.instance_id)
    w.tick(5)
    assert w.attempts(jid)[1].claim_pending
    # A new daemon on the same database: the deferred claim is read from it.
    w.rec = Reconciler(
        open_db(f"sqlite:///{tmp_path}/db.sqlite"), w.rec.config, {"fake": w.provider}, w.clock
    )
    w.rec.poll_prices()
    w.tick(5)
    assert _owner(w, jid) == 1 and len(w.attempts(jid)) == 2  # nothing placed twice
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)
    w.tick(5)
    assert _owner(w, jid) == 2 and w.job(jid).recoveries == 1


def test_a_notice_the_trainer_wrote_is_enough(make_world):
    w, jid, _ = _running(make_world)
    ckpt = w.tmp / "ckpt" / jid
    doc = {"step": 5, "total_steps": 100, "state": "noticed", "attempt": "1",
           "notice": {"source": "gcp", "seen_at": 1.0, "deadline": 151.0}}  # fmt: skip
    (ckpt / "progress.json").write_text(json.dumps(doc))
    w.tick(5)
    old, new = w.attempts(jid)
    assert old.notice_at is not None and new.replaces == old.id
    w.tick(5, n=2)
    # The old attempt's notice in progress.json is never taken for the new attempt's.
    assert w.attempts(jid)[1].notice_at is None and len(w.attempts(jid)) == 2


def test_the_old_attempt_finishing_ends_the_job_and_stops_the_new_one(make_world):
    w, jid, a = _running(make_world)
    w.provider.notice(a.instance_id)
    w.tick(5)
    ckpt = w.tmp / "ckpt" / jid
    (ckpt / contract.DONE).write_text(contract.done_doc(100, jid, 1))
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick(5, n=3)
    old, new = w.attempts(jid)
    assert old.end_reason is AttemptEnd.FINISHED
    assert w.job(jid).state is JobState.SUCCEEDED
    assert new.stop_reason == "superseded" and new.state is AttemptState.ENDED


def test_without_place_on_notice_the_job_waits_for_the_end(make_world):
    w, jid, a = _running(make_world, place_on_notice=False)
    w.provider.notice(a.instance_id)
    w.tick(5, n=3)
    assert len(w.attempts(jid)) == 1
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)
    w.tick(5, n=2)
    _, new = w.attempts(jid)
    assert new.replaces is None and not new.claim_pending and _owner(w, jid) == 2


def test_nothing_else_fits_leaves_the_job_running_as_it_is(make_world):
    w = make_world(offerings=[offering("us-east-1a", price=0.9)])
    jid = w.submit(gpus="V100:1", gpu_hours=10, place_on_notice=True)
    w.tick()
    (a,) = w.attempts(jid)
    w.provider.notice(a.instance_id)
    w.tick(5, n=2)
    job = w.job(jid)
    assert len(w.attempts(jid)) == 1 and job.state is JobState.RUNNING
    assert not w.events("held")


def test_the_old_trainers_exit_record_hands_the_store_over_before_its_instance_goes(make_world):
    """The instance may outlive its trainer until the cloud reclaims it: the exit record its
    wrapper wrote says the final save is behind it."""
    w, jid, a = _running(make_world)
    w.provider.notice(a.instance_id)
    w.tick(5)
    assert _owner(w, jid) == 1
    exits = w.tmp / "ckpt" / jid / contract.EXITS
    exits.mkdir(parents=True, exist_ok=True)
    (exits / "1.json").write_text(contract.exit_doc(1, 75, jid))
    w.tick(5)
    old, new = w.attempts(jid)
    assert old.state is AttemptState.RUNNING  # the cloud has not taken it back yet
    assert _owner(w, jid) == 2 and not new.claim_pending
    (ev,) = w.events("store_handed_over")
    assert "trainer exited (75)" in ev.message


def test_no_placement_when_this_interruption_fails_the_job(make_world):
    w, jid, a = _running(make_world, max_preemptions=0)
    w.provider.notice(a.instance_id)
    w.tick(5, n=2)
    assert len(w.attempts(jid)) == 1
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)
    w.tick(5, n=2)
    assert w.job(jid).state is JobState.FAILED and len(w.attempts(jid)) == 1


def test_a_gang_keeps_the_ordinary_path(make_world):
    """nodes > 1: the gang checkpoints together and is re-placed once it has ended."""
    w = make_world(gangs={"recovery": "whole"})
    jid = w.submit(gpus="V100:1", nodes=2, place_on_notice=True)
    w.tick()
    (a,) = w.attempts(jid)
    w.provider.notice(a.instance_id)
    w.tick()
    assert len(w.attempts(jid)) == 1  # nothing placed beside the gang
    w.tick(n=3)
    first, second = w.attempts(jid)[:2]
    assert first.end_reason is AttemptEnd.INTERRUPTED
    assert second.replaces is None and not second.claim_pending
    assert second.created_at >= first.ended_at


@pytest.mark.parametrize("at_once", [True, False], ids=["raised", "described"])
def test_one_placement_per_notice_when_the_placed_attempt_fails_to_launch(make_world, at_once):
    """The attempt placed on the notice fails to launch (refused by launch itself, or seen
    failed by describe): no other is placed beside the noticed one, which would be a new
    attempt every pass, none settled. Once the noticed one ends, the ordinary path settles
    both: the interruption counted, then the failed launch acted on, and the job placed."""
    w, jid, a = _running(make_world)
    if at_once:
        w.provider.fail_launch[POOL_B] = NotPermitted(f"aws run_instances: no {MISSING}", MISSING)
    else:
        w.provider.fail_later[POOL_B] = LaunchFailure(FailureKind.SETUP, "fake: no boot", POOL_B)
    w.provider.notice(a.instance_id)
    w.tick(5, n=2)
    old, failed = w.attempts(jid)
    assert failed.replaces == old.id and failed.end_reason is AttemptEnd.LAUNCH_FAILED
    w.tick(5, n=4)
    old, failed = w.attempts(jid)  # still these two: nothing more placed beside the old one
    assert old.state is AttemptState.RUNNING and _owner(w, jid) == 1
    job = w.job(jid)
    assert job.state is JobState.RUNNING and job.settled_attempt != failed.id
    w.provider.fail_launch.clear()
    w.provider.fail_later.clear()
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)
    w.tick(5)
    job = w.job(jid)
    # As after any failed launch: settled (no failure drawn from max_attempts, no back-off),
    # the interruption counted once, and the job placed again the ordinary way.
    assert job.settled_attempt == failed.id and job.recoveries == 1 and job.failures == 0
    third = w.attempts(jid)[2]
    assert third.replaces is None and not third.claim_pending and third.pool == POOL_B
    w.tick(5, n=3)
    assert len(w.attempts(jid)) == 3 and w.job(jid).state is JobState.RUNNING
