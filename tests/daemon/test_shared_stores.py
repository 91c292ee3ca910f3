"""A job is never finished, failed or fenced by another job's files: one store, one unfinished
job (refused at submit, checked again before the launch claims it), and what another job
wrote in a store (DONE, an exit record, progress) is ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import Session

from providers.base import EndReason
from scheduler.core.errors import UserError
from scheduler.core.states import AttemptEnd, JobState
from scheduler.state.models import Job
from trainer import contract


def _doc(**fields: object) -> str:
    """A contract file as a trainer or the instance's wrapper writes it."""
    return json.dumps(fields) + "\n"


def _store(tmp: Path) -> str:
    return (tmp / "shared" / "run").as_uri()


def test_submit_refuses_a_store_an_unfinished_job_uses(make_world):
    w = make_world()
    uri = _store(w.tmp)
    first = w.submit(gpus="V100:1", checkpoint=uri)
    with pytest.raises(UserError) as e:
        w.submit(gpus="V100:1", checkpoint=uri.replace("file://", "") + "/")  # same store
    (line,) = str(e.value).splitlines()
    assert "checkpoint:" in line and first in line and "PENDING" in line


def test_a_finished_jobs_store_is_reused_only_when_asked(make_world):
    w = make_world()
    uri = _store(w.tmp)
    first = w.submit(gpus="V100:1", checkpoint=uri)
    w.tick()
    (a,) = w.attempts(first)
    store = Path(contract.parse_uri(uri).path or "")
    (store / contract.DONE).write_text(_doc(step=10, job_id=first, attempt=1))
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick()
    assert w.job(first).state is JobState.SUCCEEDED
    with pytest.raises(UserError, match="reuse_checkpoint = true"):
        w.submit(gpus="V100:1", checkpoint=uri)
    again = w.submit(gpus="V100:1", checkpoint=uri, reuse_checkpoint=True)
    w.tick()
    (b,) = w.attempts(again)
    owner = json.loads((store / contract.OWNER).read_text())
    assert owner["job_id"] == again and owner["attempt"] == 1
    # The first job's DONE is still there: it does not finish the second one.
    w.provider.end(b.instance_id, EndReason.EXITED, exit_code=None)
    w.tick()
    assert w.attempts(again)[0].end_reason is AttemptEnd.INTERRUPTED
    assert w.job(again).state is not JobState.SUCCEEDED


def test_another_jobs_done_and_exit_record_never_end_this_job(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    store = w.tmp / "ckpt" / jid
    (store / "exits").mkdir(parents=True, exist_ok=True)
    (store / contract.DONE).write_text(_doc(step=99, job_id="j-someoneelse", attempt=1))
    (store / contract.exit_name(1)).write_text(_doc(attempt=1, exit_code=3, job_id="j-someoneelse"))
    (store / contract.PROGRESS).write_text(json.dumps({"step": 99, "job_id": "j-someoneelse"}))
    w.tick()
    assert w.job(jid).progress_step is None  # not this job's progress
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=None)
    w.tick()
    assert w.attempts(jid)[0].end_reason is AttemptEnd.INTERRUPTED
    assert w.job(jid).state is JobState.RUNNING and w.job(jid).recoveries == 1
    # Its own record counts.
    (store / contract.exit_name(2)).write_text(_doc(attempt=2, exit_code=3, job_id=jid))
    (a2,) = [x for x in w.attempts(jid) if x.number == 2]
    w.provider.end(a2.instance_id, EndReason.EXITED, exit_code=None)
    w.tick()
    assert w.job(jid).state is JobState.FAILED and "code 3" in w.job(jid).reason


def test_two_jobs_that_raced_past_submit_never_share_a_store(make_world):
    w = make_world()
    uri = _store(w.tmp)
    first = w.submit(gpus="V100:1", checkpoint=uri)
    # A second submit that checked before the first one was written: the same row, but
    # another job (what a race between two `spotwise submit` leaves).
    second = "j-racer0000000"
    with Session(w.rec.engine) as s:
        row = s.get(Job, first)
        assert row is not None
        s.add(Job(**{**row.model_dump(), "id": second}))
        s.commit()
    w.tick(n=2)
    held, refused = sorted((first, second), key=lambda j: w.job(j).state is JobState.FAILED)
    assert w.job(held).state is JobState.RUNNING
    job = w.job(refused)
    assert job.state is JobState.FAILED and held in job.reason and "in use" in job.reason
    (a,) = w.attempts(refused)
    assert a.instance_id is None and a.launch_requested_at is None  # no cloud call made
    owner = json.loads((Path(contract.parse_uri(uri).path or "") / contract.OWNER).read_text())
    assert owner["job_id"] == held
