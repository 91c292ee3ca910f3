"""Follow the job, not the attempt: `logs -f` across attempts, `events` that follow and
filter, `show` with the job's spec and a reason on every attempt, one event per failure."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from scheduler.cli import app as cli
from scheduler.core.config import local_settings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.read_settings import ReadSettings
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state import read_models
from scheduler.state.audit import emit
from scheduler.state.desired import submit
from scheduler.state.files import load_config
from scheduler.state.models import Attempt, Job
from tests.support.cli_run import env
from tests.support.ops_world import make_ops_world

runner = CliRunner()


class Lines:
    """A process's stdout read line by line on a thread, waited on with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.got: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self._q.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.got.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} in {self.got}")


def _instance_dir(world, instance_id: str) -> Path:
    d = read_models.local_instance_dir(
        ReadSettings.of_config(load_config(world.config)), instance_id
    )
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.mark.slow
def test_logs_follow_the_job_across_attempts_to_its_end(tmp_path: Path):
    w = make_ops_world(tmp_path)
    jid = w.ids["running"]
    (_instance_dir(w, "local-running-0001") / "stdout.log").write_text("first attempt\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "logs", jid, "-f", "-c", str(w.config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        out = Lines(proc)
        out.wait_for("first attempt")
        now = datetime.now(UTC)
        with Session(w.engine) as s:  # type: ignore[arg-type]
            a = s.get(Attempt, f"{jid}-a1")
            job = s.get(Job, jid)
            assert a is not None and job is not None
            a.state, a.end_reason, a.exit_code, a.ended_at = (
                AttemptState.ENDED, AttemptEnd.INTERRUPTED, 75, now,
            )  # fmt: skip
            job.state, job.reason = JobState.RECOVERING, "interrupted; resuming"
            s.add_all([a, job])
            s.commit()
        ended = out.wait_for("==> attempt 1 on local:aws/us-east-1a/p3.2xlarge/spot ended:")
        assert "interrupted" in ended and "(exit 75)" in ended
        d2 = _instance_dir(w, "local-running-0002")
        (d2 / "stdout.log").write_text("second attempt\n")
        with Session(w.engine) as s:  # type: ignore[arg-type]
            job = s.get(Job, jid)
            assert job is not None
            job.attempts, job.state, job.reason = 2, JobState.RUNNING, "running"
            s.add(job)
            s.add(
                Attempt(id=f"{jid}-a2", job_id=jid, number=2, token="t2", provider="local",
                        cloud="aws", region="us-west-2", zone="us-west-2a",
                        instance_type="p3.2xlarge", market="on-demand",
                        pool="aws/us-west-2a/p3.2xlarge/on-demand", price_per_hour=3.06,
                        state=AttemptState.RUNNING, instance_id="local-running-0002",
                        created_at=now, started_at=now)
            )  # fmt: skip
            s.commit()
        started = out.wait_for("==> attempt 2 on local:aws/us-west-2a/p3.2xlarge/on-demand")
        assert "$3.06/h" in started
        out.wait_for("second attempt")
        with Session(w.engine) as s:  # type: ignore[arg-type]
            a = s.get(Attempt, f"{jid}-a2")
            job = s.get(Job, jid)
            assert a is not None and job is not None
            a.state, a.end_reason, a.exit_code = AttemptState.ENDED, AttemptEnd.FINISHED, 0
            a.ended_at = datetime.now(UTC)
            job.state, job.reason = JobState.SUCCEEDED, "finished"
            s.add_all([a, job])
            s.commit()
        out.wait_for("==> job SUCCEEDED: finished <==")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_events_follow_prints_new_events_as_they_are_written(tmp_path: Path):
    w = make_ops_world(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "events", "-f", "-o", "wide", "--interval", "0.2",
         "-c", str(w.config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        out = Lines(proc)
        header = out.wait_for("AT (UTC)")
        assert "WHO" in header  # a follower shows who asked from its first line
        with Session(w.engine) as s:  # type: ignore[arg-type]
            emit(s, datetime.now(UTC), "released", "released by user", job_id=w.ids["held"],
                 actor="alice")  # fmt: skip
            s.commit()
        line = out.wait_for("released by user")
        assert "alice" in line.split() and w.ids["held"] in line
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_events_filter_by_time_kind_and_user(tmp_path: Path):
    w = make_ops_world(tmp_path)
    now = datetime.now(UTC)
    with Session(w.engine) as s:  # type: ignore[arg-type]
        emit(s, now - timedelta(hours=3), "attempt_lost", "old", job_id=w.ids["failed"])
        emit(s, now, "attempt_interrupted", "new", job_id=w.ids["running"])
        emit(s, now, "cancel_requested", "by alice", job_id=w.ids["pending"], actor="alice")
        s.commit()

    def messages(*args: str) -> list[str]:
        r = runner.invoke(cli.app, ["events", *args, "-o", "json", "-c", str(w.config)])
        assert r.exit_code == 0, r.output
        return [e["message"] for e in json.loads(r.stdout)["events"]]

    assert messages("--kind", "attempt_*") == ["old", "new"]
    assert messages("--kind", "attempt_*", "--since", "1h") == ["new"]
    assert messages("--user", "alice") == ["by alice"]
    assert messages("--kind", "cancel_requested,attempt_lost") == ["old", "by alice"]


def test_show_gives_the_spec_and_a_reason_on_every_attempt(tmp_path: Path, monkeypatch):
    w = make_ops_world(tmp_path)
    spec = jobspec_from_dict(
        {"name": "secretive", "command": ["python", "train.py", "--lr", "3e-4"],
         "gpus": "V100:1", "gpu_hours": 2, "spot": "only", "deadline": "52h",
         "env": {"HF_TOKEN": "hf_abcdef"}}
    )  # fmt: skip
    job = submit(w.engine, spec, datetime.now(UTC), (tmp_path / "ck").as_uri(), "alice")
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # neither alice nor root
    monkeypatch.delenv("SUDO_USER", raising=False)
    r = runner.invoke(cli.app, ["show", job.id, "-c", str(w.config)])
    assert r.exit_code == 0, r.output
    assert f"{job.id} secretive (team default, by alice)" in r.stdout
    assert "asked: gpus V100:1, 2 GPU-hours, spot only, deadline 20" in r.stdout
    assert "command: python train.py --lr 3e-4" in r.stdout
    assert "env: HF_TOKEN (values shown to its submitter and root)" in r.stdout
    assert "hf_abcdef" not in r.stdout
    doc = json.loads(runner.invoke(cli.app, ["show", job.id, "-o", "json", "-c",
                                             str(w.config)]).stdout)  # fmt: skip
    assert doc["spec"]["env"] == {"HF_TOKEN": "***"}
    # Every attempt says why it ended (or what it is doing).
    r = runner.invoke(cli.app, ["show", w.ids["failed"], "-c", str(w.config)])
    assert "failed: the job's command exited with code 1" in r.stdout
    r = runner.invoke(cli.app, ["show", w.ids["running"], "-c", str(w.config)])
    assert "\n     running\n" in r.stdout


def test_one_event_per_failure(make_world, tmp_path: Path):
    """A capacity error fails the attempt with the cloud's words; the job's next state
    said the same words again in a second event."""
    from providers.base import CapacityUnavailable

    w = make_world()
    pool = "aws/us-east-1a/p3.2xlarge/spot"
    w.provider.fail_launch[pool] = CapacityUnavailable("InsufficientInstanceCapacity", pool=pool)
    jid = w.submit(gpus="V100:1")
    w.tick(n=2)
    cfg = tmp_path / "cli.toml"
    cfg.write_text(f'[daemon]\ndatabase_url = "{w.rec.engine.url}"\n[providers]\n')
    r = runner.invoke(cli.app, ["events", "--job", jid, "-o", "json", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    texts = [e["message"] for e in json.loads(r.stdout)["events"]]
    failed = [t for t in texts if "InsufficientInstanceCapacity" in t]
    assert len(failed) == 1, texts


def test_the_local_instance_dir_rule_is_the_markets(tmp_path: Path):
    w = make_ops_world(tmp_path)
    cfg = load_config(w.config)
    assert read_models.local_instance_dir(ReadSettings.of_config(cfg), "x").parent.parent == (
        local_settings(cfg).resolved_state_dir()
    )
