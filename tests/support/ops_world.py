"""A small database with jobs in every interesting state, for the operator-CLI tests."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlmodel import Session

from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.lease import DaemonRecord
from scheduler.state.models import Attempt, Job

LONG_NAME = "llama-70b-finetune-with-a-very-long-descriptive-name"
LONG_REASON = (
    "no offering with 8x H100 under $5/h (cheapest is aws/us-east-1/p5.48xlarge spot "
    "at $31.46/h); [bold]not markup[/bold]"
)


@dataclass
class OpsWorld:
    tmp: Path
    config: Path
    engine: object
    ids: dict[str, str]

    def job(self, job_id: str) -> Job:
        with Session(self.engine) as s:  # type: ignore[arg-type]
            job = s.get(Job, job_id)
            assert job is not None
            return job


def make_ops_world(tmp: Path, *, beat: bool = True) -> OpsWorld:
    """Jobs: running (with an attempt), pending (long name and reason), failed (with
    counters), held, and one finished two hours ago. Real clock (local market at 1x)."""
    state = tmp / "state"
    config = tmp / "spotwise.toml"
    config.write_text(f'[daemon]\nstate_dir = "{state}"\n\n[providers.local]\nspeedup = 1\n')
    engine = open_db(f"sqlite:///{state / 'spotwise.db'}")
    now = datetime.now(UTC)
    ids: dict[str, str] = {}

    def add(key: str, name: str, team: str, age_min: float) -> Job:
        spec = jobspec_from_dict({"name": name, "team": team, "command": ["train"]})
        job = submit(engine, spec, now - timedelta(minutes=age_min), (tmp / "ck").as_uri())
        ids[key] = job.id
        return job

    add("done", "old-finished", "research", 180)
    add("failed", "crashes", "research", 100)
    add("held", "over-budget", "research", 90)
    add("running", "train-v100", "vision", 30)
    add("pending", LONG_NAME, "vision", 5)
    with Session(engine) as s:
        for key, st, reason in (
            ("done", JobState.SUCCEEDED, "finished"),
            ("failed", JobState.FAILED, "exit code 1"),
            ("held", JobState.HELD, "budget 'research' is exhausted"),
            ("running", JobState.RUNNING, "running"),
            ("pending", JobState.PENDING, LONG_REASON),
        ):
            job = s.get(Job, ids[key])
            assert job is not None
            job.state, job.reason = st, reason
            job.updated_at = now - timedelta(hours=2) if key == "done" else now
            if key == "failed":
                job.failures, job.step_failures, job.last_error = 3, 2, "boom"
                job.not_before = now + timedelta(hours=1)
                job.settled_attempt = f"{job.id}-a1"
            if key in ("failed", "running"):
                job.attempts = 1  # the daemon writes it with each attempt (Attempt.number)
            if key == "held":
                job.held_budget, job.held_limit_usd = "research", 500.0
            s.add(job)
        for key, ended in (("running", False), ("failed", True)):
            jid = ids[key]
            s.add(
                Attempt(
                    id=f"{jid}-a1",
                    job_id=jid,
                    number=1,
                    token=secrets.token_hex(8),
                    provider="local",
                    cloud="aws",
                    region="us-east-1",
                    zone="us-east-1a",
                    instance_type="p3.2xlarge",
                    market="spot",
                    pool="aws/us-east-1a/p3.2xlarge/spot",
                    price_per_hour=0.918,
                    state=AttemptState.ENDED if ended else AttemptState.RUNNING,
                    instance_id=f"local-{key}-0001",
                    created_at=now - timedelta(minutes=20),
                    started_at=now - timedelta(minutes=20),
                    ended_at=now - timedelta(minutes=10) if ended else None,
                    end_reason=AttemptEnd.FAILED if ended else None,
                    exit_code=1 if ended else None,
                    cost_usd=0.3,
                )
            )
        s.commit()
    if beat:
        record = DaemonRecord(engine, timedelta(minutes=1))
        record.claim("test")
        record.beat("ok")
    return OpsWorld(tmp, config, engine, ids)
