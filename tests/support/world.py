"""The in-memory world of the daemon tests: a database, fake clouds, a simulated clock and
the real Reconciler, as the `make_world` fixture (registered by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlmodel import Session, select

from scheduler.core.clock import SimClock
from scheduler.core.config import (
    BudgetSettings,
    Config,
    DaemonSettings,
    GangSettings,
    PolicySettings,
)
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.models import Attempt, Event, Job
from tests.support.fakes import NOW, FakeProvider, offering


@dataclass
class World:
    rec: Reconciler
    provider: FakeProvider
    clock: SimClock
    tmp: Path

    def submit(self, **spec) -> str:
        spec.setdefault("name", "job")
        spec.setdefault("command", ["train"])
        job = submit(
            self.rec.engine, jobspec_from_dict(spec), self.clock.now(), (self.tmp / "ckpt").as_uri()
        )
        return job.id

    def tick(self, seconds: float = 5, n: int = 1) -> None:
        for _ in range(n):
            self.clock.advance(seconds)
            self.rec.reconcile()
            self.rec.accrue()

    def tick_until(self, done: Callable[[], bool], seconds: float = 5, limit: int = 100) -> bool:
        """Tick until `done()` holds, at most `limit` times; whether it came to hold (the
        caller asserts what it needs afterwards)."""
        for _ in range(limit):
            self.tick(seconds)
            if done():
                return True
        return False

    def job(self, job_id: str) -> Job:
        with Session(self.rec.engine) as s:
            return s.get(Job, job_id)

    def attempts(self, job_id: str) -> list[Attempt]:
        with Session(self.rec.engine) as s:
            return list(
                s.exec(
                    select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)
                ).all()
            )

    def events(self, kind: str | None = None) -> list[Event]:
        with Session(self.rec.engine) as s:
            q = select(Event)
            if kind:
                q = q.where(Event.kind == kind)
            return list(s.exec(q).all())


@pytest.fixture
def make_world(tmp_path):
    def make(offerings=None, budgets=(), provider=None, policy=None, gangs=None, **daemon) -> World:
        daemon.setdefault("database_url", f"sqlite:///{tmp_path}/db.sqlite")
        daemon.setdefault("accrue_interval", "30s")
        daemon.setdefault("stop_grace", "30s")
        cfg = Config(
            daemon=DaemonSettings(**daemon),
            budgets=[BudgetSettings(**b) for b in budgets],
            policy=PolicySettings(**(policy or {})),
            gangs=GangSettings(**(gangs or {})),
        )
        fake = provider or FakeProvider(
            offerings
            or [
                offering("us-east-1a", price=0.9),
                offering("us-east-1b", price=1.1),
                offering("us-east-1a", price=3.06, market="on-demand"),
            ]
        )
        clock = SimClock(NOW)
        fake.clock = clock
        rec = Reconciler(open_db(daemon["database_url"]), cfg, {"fake": fake}, clock)
        rec.poll_prices()
        return World(rec, fake, clock, tmp_path)

    return make
