"""What the daemon learned survives a handover to the other replica: the deadline policy's
state, the pools' interruption and capacity history, and the leak collector's grace clock
(they live in the database; the new holder rebuilds from it, it never starts from zero)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session, select

from providers.base import EndReason, LaunchRequest
from scheduler.core.clock import SimClock
from scheduler.core.config import Config, DaemonSettings, PolicySettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.lease import Lease, LeaseTimings
from scheduler.state.models import Attempt, LeakSeen, PoolState
from tests.support.fakes import NOW, FakeProvider, offering
from tests.system.postgres.conftest import expire_lease

pytestmark = pytest.mark.timeout(180)
TIMINGS = LeaseTimings(ttl=30, renew=10, deadline=20, statement_timeout=1)
OD = offering("us-east-1a", price=3.06, market="on-demand")


class Replicas:
    """Two daemons' reconcilers over one PostgreSQL database and one (fake) cloud."""

    def __init__(self, url: str, tmp_path, **daemon) -> None:
        self.url = url
        self.engine = open_db(url)
        self.clock = SimClock(NOW)
        self.fake = FakeProvider(
            [offering("us-east-1a", price=0.9), offering("us-east-1b", price=1.1), OD]
        )
        self.fake.clock = self.clock
        policy = daemon.pop("policy", {})
        daemon.setdefault("accrue_interval", "30s")
        self.cfg = Config(
            daemon=DaemonSettings(database_url=url, **daemon), policy=PolicySettings(**policy)
        )
        self.tmp = tmp_path
        self.rec = self._holder()

    def _holder(self) -> Reconciler:
        lease = Lease(self.url, TIMINGS, "test")
        assert lease.try_acquire()
        rec = Reconciler(self.engine, self.cfg, {"fake": self.fake}, self.clock, fence=lease)
        rec.poll_prices()
        return rec

    def handover(self) -> Reconciler:
        """The holder stops renewing; the standby takes the lease and starts from the database."""
        old = self.rec
        expire_lease(self.url)
        self.rec = self._holder()
        assert old.fence is not None and self.rec.fence is not None
        assert self.rec.fence.epoch == old.fence.epoch + 1  # type: ignore[attr-defined]
        return old

    def submit(self, **spec) -> str:
        spec.setdefault("command", ["train"])
        job = submit(
            self.engine, jobspec_from_dict(spec), self.clock.now(), (self.tmp / "c").as_uri()
        )
        return job.id

    def tick(self, seconds: float = 5) -> None:
        self.clock.advance(seconds)
        self.rec.reconcile()
        self.rec.accrue()


def test_deadline_policy_state_survives_a_handover(pg_url, tmp_path):
    r = Replicas(pg_url, tmp_path, policy={"deadline_policy": "spotwise"}, reconcile_interval="30m")
    jid = r.submit(name="dl", gpus="V100:1", gpu_hours=20, deadline="60h")
    r.tick()
    a = offering("us-east-1a", price=0.9)
    b = offering("us-east-1b", price=0.8)
    for i in range(8):  # 1b comes and goes: the policy learns that it is flaky
        r.fake.set_offerings([a, OD] + ([b] if i % 2 else []))
        r.rec.poll_prices()
        r.tick(1800)
    learned = r.rec.planner._policies[jid].model
    assert learned.pools["us-east-1b"].losses > 0
    old = r.handover()
    assert not r.rec.planner.knows(jid)
    r.tick(0)
    got = r.rec.planner._policies[jid].model
    assert r.rec.planner is not old.planner
    assert got.rates("us-east-1b") == learned.rates("us-east-1b")
    assert got.last_time == learned.last_time


def test_pool_learning_survives_a_handover(pg_url, tmp_path):
    r = Replicas(pg_url, tmp_path, unavailable_ttl="1h")
    jid = r.submit(name="p", gpus="V100:1")
    r.tick()
    r.tick()
    with Session(r.engine) as s:
        (att,) = s.exec(select(Attempt).where(Attempt.job_id == jid)).all()
    r.fake.end(att.instance_id, EndReason.INTERRUPTED)
    r.tick()
    r.tick()
    with Session(r.engine) as s:
        before = {p.pool: (p.interruptions, p.exposure_hours) for p in s.exec(select(PoolState))}
    assert before[att.pool][0] == 1
    rates = r.rec.jobs._facts(Session(r.engine)).rates
    assert att.pool in rates
    r.handover()
    assert r.rec.jobs._facts(Session(r.engine)).rates == rates  # the new holder's view
    r.tick()
    with Session(r.engine) as s:
        attempts = s.exec(select(Attempt).where(Attempt.job_id == jid)).all()
        assert s.get(PoolState, att.pool).interruptions == 1  # counted once, not reset
    assert len(attempts) == 2 and attempts[-1].pool != att.pool  # it still avoids that pool


def test_the_leak_grace_clock_survives_a_handover(pg_url, tmp_path):
    r = Replicas(pg_url, tmp_path, leak_grace="5m")
    o = r.fake.offerings()[0]
    job = r.submit(name="gone", gpus="H100:16")  # a job of this database, never placed
    ours = {
        "spotwise-owner": "spotwise",
        "spotwise-attempt": "gone",
        "spotwise-install": r.rec.install_id,
        "spotwise-job": job,
    }
    (leaked,) = r.fake.launch(LaunchRequest("stray", o, ["x"], {}, ours))
    r.tick()
    with Session(r.engine) as s:
        seen = s.get(LeakSeen, leaked.id)
    assert seen is not None and seen.first_seen_at == NOW + timedelta(seconds=5)
    r.tick(200)
    r.handover()
    r.tick(60)  # 260 s since first seen: not yet
    assert r.fake.instances[leaked.id].end_reason is None
    r.tick(60)  # 320 s since first seen (the new holder has seen it for only 120 s)
    assert r.fake.instances[leaked.id].end_reason is EndReason.TERMINATED
