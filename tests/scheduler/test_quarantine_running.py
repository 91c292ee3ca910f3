"""A job quarantined while it runs: its instance is stopped, and it stays FAILED with the
quarantine's reason (the stop is not mistaken for a user's cancel)."""

from __future__ import annotations

from sqlmodel import Session

from scheduler.models import AttemptEnd, AttemptState, Job, JobState


def test_a_running_job_quarantined_stays_failed_and_its_attempt_says_why(make_world):
    w = make_world(quarantine_after=3, backoff_base="1s", backoff_max="1s", stop_grace="5s")
    bad = w.submit(name="bad", gpus="V100:1")
    w.tick()
    assert w.job(bad).state is JobState.RUNNING
    with Session(w.rec.engine) as s:
        j = s.get(Job, bad)
        j.spec_json = "{not json"
        s.add(j)
        s.commit()
    for _ in range(12):
        w.tick(5)
    job = w.job(bad)
    (a,) = w.attempts(bad)
    assert a.state is AttemptState.ENDED, a
    assert job.state is JobState.FAILED and "quarantined" in job.reason, job.reason
    assert a.end_reason is AttemptEnd.FAILED
