"""A stored job spec that today's validation refuses (a database from an older spotwise, a
GPU registry or region list that changed since) never stops other launches and never
kills a running job: that attempt alone fails with the reason, a running one runs on, and
`spotwise db upgrade` (and the daemon at start) lists such specs."""

from __future__ import annotations

import json
import logging

from sqlmodel import Session
from typer.testing import CliRunner

from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state.models import Job


def _break_spec(w, job_id: str) -> None:  # type: ignore[no-untyped-def]
    """As if the GPU registry no longer knew the model the job asked for."""
    with Session(w.rec.engine) as s:
        job = s.get(Job, job_id)
        spec = json.loads(job.spec_json)
        spec["gpus"] = ["Z9000:1"]
        job.spec_json = json.dumps(spec)
        s.add(job)
        s.commit()


def test_a_launching_attempt_whose_spec_no_longer_parses_fails_alone(make_world):
    w = make_world()
    good = w.submit(name="good", gpus="V100:1")
    bad = w.submit(name="bad", gpus="V100:1")
    w.rec.jobs.step()  # both intents written, as a crash after the intent leaves them
    _break_spec(w, bad)
    w.tick()
    assert w.job(good).state is JobState.RUNNING  # the batch no longer rolls back
    (a,) = w.attempts(bad)
    assert a.state is AttemptState.ENDED and a.end_reason is AttemptEnd.REJECTED
    assert "no longer validates" in a.detail and "Z9000" in a.detail
    w.tick()
    job = w.job(bad)
    assert job.state is JobState.FAILED and "no longer validates" in job.reason
    assert w.provider.launch_calls == 1


def test_a_waiting_job_whose_spec_no_longer_parses_fails_at_once_with_the_reason(make_world):
    w = make_world()
    jid = w.submit(name="bad", gpus="H100:16")  # waits: nothing offers it
    w.tick()
    _break_spec(w, jid)
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.FAILED
    assert "stored job spec no longer validates" in job.reason and "Z9000" in job.reason
    assert not w.events("step_failed")


def test_a_running_job_whose_spec_no_longer_parses_keeps_its_instance(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    _break_spec(w, jid)
    w.tick(n=12)  # a minute: quarantine used to stop it after five failed steps (~25 s)
    assert w.provider.terminate_calls == 0
    assert w.provider.instances[a.instance_id].state.value == "running"
    job = w.job(jid)
    assert job.state is JobState.RUNNING and "no longer validates" in job.reason
    assert len(w.events("spec_invalid")) == 1  # said once
    w.tick(3600)
    assert w.attempts(jid)[0].cost_usd > 0.8  # billed all along


def test_db_upgrade_and_the_daemon_start_list_specs_that_no_longer_validate(
    make_world, tmp_path, caplog
):
    from scheduler.cli.app import app
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    w = make_world(database_url=f"sqlite:///{tmp_path}/spotwise.db", state_dir=tmp_path)
    jid = w.submit(name="old", gpus="V100:1")
    fine = w.submit(name="fine", gpus="V100:1")
    _break_spec(w, jid)
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    out = CliRunner().invoke(app, ["db", "upgrade", "-c", str(cfg)])
    assert out.exit_code == 0, out.output
    assert jid in out.output and "Z9000" in out.output and fine not in out.output
    with caplog.at_level(logging.WARNING, logger="spotwise"):
        daemon = Daemon(cfg, clock=SimClock(w.clock.now()))
    daemon.lock.release()
    logged = [r.getMessage() for r in caplog.records if jid in r.getMessage()]
    assert logged and "no longer validates" in logged[0]
