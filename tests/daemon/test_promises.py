"""The daemon's promises, each driven through the real controllers over the in-memory cloud:
no lost job, one bad job never hurts another, spend at the price paid, no double launch."""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, select

from providers.base import (
    CapacityUnavailable,
    EndReason,
    LaunchRejected,
    Market,
)
from providers.fake import FakeCloud
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import hours
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.desired import cancel
from scheduler.state.models import Attempt, Event, Job, SpendBucket
from tests.support.fakes import offering
from trainer import contract

POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
POOL_B = "aws/us-east-1b/p3.2xlarge/spot"


def _ckpt(w, jid: str) -> Path:
    return w.tmp / "ckpt" / jid


# -- 1. No job is lost ---------------------------------------------------------------------


def test_exit_without_code_or_done_is_an_interruption_to_recover(make_world):
    """AWS: a trainer checkpoints on the notice, exits 75, powers off; no tag, no code."""
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=None)
    w.tick()
    assert w.attempts(jid)[0].end_reason is AttemptEnd.INTERRUPTED
    assert w.job(jid).state is JobState.RUNNING and w.job(jid).recoveries == 1


def test_exit_code_travels_through_the_checkpoint_store(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    store = _ckpt(w, jid)
    (store / "exits").mkdir(parents=True)
    (store / contract.exit_name(1)).write_text(contract.exit_doc(1, 3))
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=None)
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.FAILED and "code 3" in job.reason
    assert w.attempts(jid)[0].exit_code == 3


@pytest.mark.slow
def test_owner_is_claimed_in_the_store_before_the_launch(make_world):
    w = make_world()
    seen: list[str | None] = []
    w.provider.on_launch = lambda req, _: seen.append(
        (
            Path(req.env["SPOTWISE_CHECKPOINT_URI"].removeprefix("file://")) / contract.OWNER
        ).read_text()
    )
    jid = w.submit(gpus="V100:1")
    w.tick()
    assert contract.owner_attempt(seen[0]) == 1
    # The second attempt fences the first one's trainer out of the store.
    w.provider.end(w.attempts(jid)[0].instance_id, EndReason.INTERRUPTED)
    w.tick()
    owner = (_ckpt(w, jid) / contract.OWNER).read_text()
    assert contract.owner_attempt(owner) == 2 and contract.fenced(owner, attempt=1)


def test_max_preemptions_is_its_own_budget(make_world):
    w = make_world(max_preemptions=1)
    jid = w.submit(gpus="V100:1")
    w.tick()
    for _ in range(2):
        a = next(x for x in w.attempts(jid) if x.state is not AttemptState.ENDED)
        w.provider.end(a.instance_id, EndReason.INTERRUPTED)
        w.tick()
    job = w.job(jid)
    assert job.state is JobState.FAILED and "max_preemptions" in job.reason


def _deny_store_reads(monkeypatch):
    """Every checkpoint-store read fails as S3 AccessDenied would; returns the real read."""
    real = CheckpointStores.read

    def denied(self, uri, name):
        raise StoreError("s3://bucket/ckpt/DONE: AccessDenied")

    monkeypatch.setattr(CheckpointStores, "read", denied)
    return real


def _corrupt_spec(w, job_id: str) -> None:
    """A job whose stored spec no longer parses: every step of it fails."""
    with Session(w.rec.engine) as s:
        j = s.get(Job, job_id)
        j.spec_json = "{not json"
        s.add(j)
        s.commit()


def test_an_unreadable_store_is_never_read_as_absent(make_world, monkeypatch):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    real = _deny_store_reads(monkeypatch)
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=None)
    w.tick(n=3)
    (a,) = w.attempts(jid)
    assert a.state is not AttemptState.ENDED, "ended on a failed read"
    assert len(w.events("store_unreadable")) == 1  # said once, not every pass
    monkeypatch.setattr(CheckpointStores, "read", real)
    _ckpt(w, jid).mkdir(parents=True, exist_ok=True)
    (_ckpt(w, jid) / contract.DONE).write_text("{}")
    w.tick()
    assert w.job(jid).state is JobState.SUCCEEDED


def test_billing_stays_stopped_when_the_store_comes_back_after_the_cloud_forgot(
    make_world, monkeypatch
):
    """The store is unreadable when the instance goes: billing stops there. Two hours later
    the store answers and the cloud no longer knows the instance (no end time): the attempt
    keeps its first end, and the outage is not billed."""
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    real = _deny_store_reads(monkeypatch)
    del w.provider.instances[a.instance_id]  # NOT_FOUND from now on
    w.tick()
    first_end = w.attempts(jid)[0].ended_at
    assert first_end is not None
    w.tick(3600, n=2)
    monkeypatch.setattr(CheckpointStores, "read", real)
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.ENDED and a.ended_at == first_end
    hours = (first_end - a.started_at).total_seconds() / 3600
    assert a.cost_usd == pytest.approx(a.price_per_hour * hours, rel=1e-6)


def test_s3_access_denied_is_an_error_not_absent(tmp_path):
    from botocore.exceptions import ClientError

    from trainer.cloud_stores import S3Store

    class Denying:
        def get_object(self, **_):
            raise ClientError({"Error": {"Code": "AccessDenied"}}, "GetObject")

    class Missing:
        def get_object(self, **_):
            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")

    uri = "s3://bucket/ckpt/j-1"
    stores = CheckpointStores()
    stores._remote[uri] = store = S3Store(uri, tmp_path)
    store.s3 = Denying()
    with pytest.raises(StoreError, match="AccessDenied"):
        stores.done(uri)
    store.s3 = Missing()
    assert stores.done(uri) is False


def test_one_uri_helper_for_trainer_and_scheduler(tmp_path):
    where = tmp_path / "my home" / "ckpt"
    uri = where.as_uri()
    assert "%20" in uri
    assert contract.parse_uri(uri).path == where
    where.mkdir(parents=True)
    (where / contract.PROGRESS).write_text('{"step": 7}')
    assert CheckpointStores().progress(uri) == {"step": 7}


# -- 2. One bad job never hurts another -----------------------------------------------------


def test_rejected_request_fails_the_job_not_the_pool(make_world):
    w = make_world(max_attempts=2, backoff_base="1s")
    w.provider.fail_launch[POOL_A] = LaunchRejected("InvalidParameterValue: bad env name")
    bad = w.submit(name="bad", gpus="V100:1")
    w.tick()
    assert w.attempts(bad)[0].end_reason is AttemptEnd.REJECTED
    assert not w.events("pool_unavailable")
    for _ in range(4):
        w.tick(30)
    job = w.job(bad)
    assert job.state is JobState.FAILED and "rejected" in job.reason
    # The pool is fine for everyone else.
    del w.provider.fail_launch[POOL_A]
    good = w.submit(name="good", gpus="V100:1")
    w.tick()
    assert w.attempts(good)[0].pool == POOL_A and w.job(good).state is JobState.RUNNING


def test_capacity_marks_the_pool_for_every_job(make_world):
    w = make_world()
    w.provider.fail_launch[POOL_A] = CapacityUnavailable("InsufficientInstanceCapacity", POOL_A)
    jid = w.submit(gpus="V100:1")
    w.tick()
    assert [a.pool for a in w.attempts(jid)] == [POOL_A, POOL_B]
    assert w.events("pool_unavailable")


def test_rejections_back_off_per_job(make_world):
    w = make_world(max_attempts=5, backoff_base="60s", backoff_max="10m")
    w.provider.fail_launch[POOL_A] = LaunchRejected("bad request")
    w.provider.fail_launch[POOL_B] = LaunchRejected("bad request")
    jid = w.submit(gpus="V100:1", spot="only")
    w.tick()
    tried = len(w.attempts(jid))
    w.tick(5, n=5)  # 25 s: inside the 60 s back-off, nothing is retried
    assert len(w.attempts(jid)) == tried
    w.tick(60)
    assert len(w.attempts(jid)) == tried + 1


def test_quarantine_after_repeated_step_failures_with_one_event_per_reason(make_world):
    w = make_world(quarantine_after=4, backoff_base="1s", backoff_max="1s")
    bad = w.submit(name="bad", gpus="V100:1")
    good = w.submit(name="good", gpus="V100:1")
    _corrupt_spec(w, bad)
    for _ in range(6):
        w.tick(5)
    assert w.job(good).state is JobState.RUNNING
    job = w.job(bad)
    assert job.state is JobState.FAILED and "quarantined" in job.reason
    assert len(w.events("step_failed")) == 1
    assert len(w.events("quarantined")) == 1


def test_a_running_job_quarantined_stays_failed_and_its_attempt_says_why(make_world):
    """Its instance is stopped, and the stop is not mistaken for a user's cancel."""
    w = make_world(quarantine_after=3, backoff_base="1s", backoff_max="1s", stop_grace="5s")
    bad = w.submit(name="bad", gpus="V100:1")
    w.tick()
    assert w.job(bad).state is JobState.RUNNING
    _corrupt_spec(w, bad)
    for _ in range(12):
        w.tick(5)
    job = w.job(bad)
    (a,) = w.attempts(bad)
    assert a.state is AttemptState.ENDED, a
    assert job.state is JobState.FAILED and "quarantined" in job.reason, job.reason
    assert a.end_reason is AttemptEnd.FAILED


def test_waiting_reason_is_written_once(make_world):
    w = make_world()
    w.submit(gpus="A100:8")
    w.tick(5, n=10)
    assert len(w.events("waiting")) == 1


# -- 3. Spend at the price actually paid; hard budgets hold --------------------------------


def test_spend_accrues_at_each_intervals_price(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1", spot="only")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.pool == POOL_A
    w.tick(1800)  # half an hour at $0.90
    w.provider.set_offerings([offering("us-east-1a", price=2.0), offering("us-east-1b", price=2.5)])
    w.rec.poll_prices()
    w.tick(1800)  # half an hour at $2.00
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick()
    (a,) = w.attempts(jid)
    started = 5  # launched on the first tick
    expect = 0.9 * 1800 / 3600 + 2.0 * (1800 + 5 - started) / 3600
    assert a.cost_usd == pytest.approx(expect, rel=1e-6)
    assert w.job(jid).cost_usd == pytest.approx(expect, rel=1e-6)
    with Session(w.rec.engine) as s:
        buckets = s.exec(select(SpendBucket).where(SpendBucket.job_id == jid)).all()
    assert sum(b.usd for b in buckets) == pytest.approx(expect, rel=1e-6)


def _billed(w, jid: str) -> tuple[float, float, float]:
    """The job's cost, its attempts' and its spend buckets' sums."""
    with Session(w.rec.engine) as s:
        buckets = s.exec(select(SpendBucket).where(SpendBucket.job_id == jid)).all()
    return (
        w.job(jid).cost_usd,
        sum(a.cost_usd for a in w.attempts(jid)),
        sum(b.usd for b in buckets),
    )


@pytest.mark.parametrize("store", ["readable", "unreadable"])
def test_an_end_learned_after_an_accrual_is_refunded_by_the_pass_that_learns_it(
    make_world, monkeypatch, store
):
    """An accrual charges up to now; the instance had ended before that, and the pass that
    sees the end must bill it only to the end at once (not at the next accrual): a job's
    cost, its buckets and the budgets read from them never show time it did not run. With
    the store unreadable the outcome waits, but billing stops at the end all the same."""
    w = make_world(budgets=[{"name": "all", "limit_usd": 100.0, "window": "total"}])
    jid = w.submit(gpus="V100:1", spot="only")
    w.tick()
    (a,) = w.attempts(jid)
    w.tick(600)
    if store == "unreadable":
        _deny_store_reads(monkeypatch)
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)
    ended = w.clock.now()
    w.clock.advance(300)
    w.rec.accrue()  # five minutes past the end, not known yet
    assert w.attempts(jid)[0].cost_usd > 0.9 * hours(ended - a.started_at) + 0.07
    w.clock.advance(5)
    w.rec.reconcile()  # learns the end; no accrual after it
    first = w.attempts(jid)[0]
    assert first.ended_at == ended and first.accrued_until == ended
    paid = 0.9 * hours(ended - a.started_at)
    assert first.cost_usd == pytest.approx(paid, rel=1e-9)
    cost, attempts, buckets = _billed(w, jid)
    assert cost == pytest.approx(attempts, rel=1e-9) and buckets == pytest.approx(cost, rel=1e-9)
    assert cost == pytest.approx(paid, rel=1e-9)  # any new attempt is not billed yet
    with w.rec.db.read() as s:
        (budget,) = w.rec.spend.statuses(s, w.clock.now())
    assert budget.spent == pytest.approx(paid, rel=1e-9)


def test_adopted_instance_is_billed_from_its_launch_time(make_world):
    w = make_world()

    def crash(name: str) -> None:
        if name == "after_launch":
            raise CrashForTest(name)

    crashing = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock, crash_hook=crash)
    crashing.poll_prices()
    jid = w.submit(gpus="V100:1")
    w.clock.advance(5)
    with pytest.raises(CrashForTest):
        crashing.reconcile()
    launched = w.clock.now()
    w.clock.advance(3600)  # the daemon is down for an hour; the instance runs
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING and a.started_at == launched
    assert a.cost_usd == pytest.approx(0.9 * (3600 + 5) / 3600, rel=1e-6)


def test_stopping_a_launching_attempt_terminates_what_the_cloud_started(make_world):
    w = make_world()

    def crash(name: str) -> None:
        if name == "after_launch":
            raise CrashForTest(name)

    crashing = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock, crash_hook=crash)
    crashing.poll_prices()
    jid = w.submit(gpus="V100:1")
    with pytest.raises(CrashForTest):
        crashing.reconcile()
    assert len(w.provider.running()) == 1  # started, but the daemon never recorded it
    cancel(w.rec.engine, jid, w.clock.now())
    w.tick(n=3)
    assert w.provider.running() == []
    assert w.job(jid).state is JobState.CANCELLED


@pytest.mark.slow
def test_budget_is_enforced_in_the_first_pass_of_a_crash_loop(make_world):
    """Each 'restart' launches, crashes before recording, restarts: never over the limit."""
    w = make_world(
        budgets=[{"name": "cap", "limit_usd": 1.0, "window": "total"}],
        accrue_interval="30s",
        stop_grace="30s",
    )
    jid = w.submit(gpus="V100:1", spot="only")
    for _ in range(160):  # 80 minutes of market time: the $1 binds after about 66

        def crash(name: str) -> None:
            if name == "after_record":
                raise CrashForTest(name)

        d = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock, crash_hook=crash)
        d.poll_prices()
        d.accrue()  # what the daemon does first on start
        with contextlib.suppress(CrashForTest):
            d.reconcile()
        w.clock.advance(30)
    w.tick(30, n=5)
    spent = sum(b.usd for b in _buckets(w))
    assert 0.8 < spent <= 1.0
    assert w.job(jid).state is JobState.HELD


def _buckets(w) -> list[SpendBucket]:
    with Session(w.rec.engine) as s:
        return list(s.exec(select(SpendBucket)).all())


def test_accrual_never_waits_on_a_cloud_call(make_world):
    """A describe that hangs holds no lock: accrue runs and requests the budget stop."""
    w = make_world(budgets=[{"name": "cap", "limit_usd": 0.5, "window": "total"}])
    jid = w.submit(gpus="V100:1", spot="only")
    w.tick()
    gate, entered = threading.Event(), threading.Event()
    real = w.provider.describe

    def slow(refs):
        entered.set()
        gate.wait(30)
        return real(refs)

    w.provider.describe = slow  # type: ignore[method-assign]
    w.clock.advance(3600)
    t = threading.Thread(target=w.rec.reconcile)
    t.start()
    assert entered.wait(10)
    done = threading.Event()
    threading.Thread(target=lambda: (w.rec.accrue(), done.set())).start()
    finished_while_blocked = done.wait(10)
    gate.set()
    t.join(30)
    assert finished_while_blocked, "accrue waited behind a cloud call"
    (a,) = w.attempts(jid)
    assert a.stop_reason == "budget"


def test_team_names_differing_by_case_share_one_budget(make_world):
    w = make_world(budgets=[{"name": "r", "scope": "team:research", "limit_usd": 0.001}])
    jid = w.submit(gpus="V100:1", team="Research")
    w.tick()
    job = w.job(jid)
    # held by the team's budget (it cannot pay one accrual interval of any offering)
    assert job.team == "research" and job.state is JobState.HELD and job.held_budget == "r"
    assert "budget 'r'" in job.reason


# -- 4. No cloud I/O inside a transaction; no double launch after a restart ----------------


def test_a_submit_never_waits_behind_a_slow_cloud_call(make_world):
    w = make_world()
    w.submit(gpus="V100:1")
    w.tick()
    gate, entered = threading.Event(), threading.Event()
    real = w.provider.describe

    def slow(refs):
        entered.set()
        gate.wait(30)
        return real(refs)

    w.provider.describe = slow  # type: ignore[method-assign]
    t = threading.Thread(target=w.rec.reconcile)
    t.start()
    assert entered.wait(10)
    try:
        # A separate connection, as the CLI's: the write goes through at once.
        from scheduler.state.db import make_engine

        other = make_engine(str(w.rec.engine.url))
        with Session(other) as s:
            s.connection().exec_driver_sql("PRAGMA busy_timeout=1")
            s.add(Event(at=w.clock.now(), kind="probe", message="x"))
            s.commit()
    finally:
        gate.set()
        t.join(30)


@pytest.mark.slow
def test_late_visibility_after_a_restart_never_launches_twice(make_world):
    cloud = FakeCloud(
        [offering("us-east-1a", price=0.9), offering("us-east-1a", price=3.0, market="on-demand")],
        visibility_delay=timedelta(seconds=90),
    )
    w = make_world(provider=cloud)
    jid = w.submit(gpus="V100:1")
    w.tick()  # launched; describe does not show it yet
    for _ in range(5):
        # A new daemon process every pass: nothing it knows is in memory.
        w.rec = Reconciler(w.rec.engine, w.rec.config, {"fake": cloud}, w.clock)
        w.rec.poll_prices()
        w.tick(15)
    assert cloud.launch_calls == 1 and len(cloud.instances) == 1
    (a,) = w.attempts(jid)
    assert a.state is not AttemptState.ENDED
    w.tick(60, n=2)
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING


@pytest.mark.slow
def test_fault_injection_every_job_completes_without_a_double_launch(make_world, tmp_path):
    from providers.fake import Faults

    cloud = FakeCloud(
        [offering("us-east-1a", price=0.9), offering("us-east-1b", price=1.1),
         offering("us-east-1a", price=3.0, market=Market.ON_DEMAND)],
        faults=Faults(rate=0.08, seed=7), start_running=True,
    )  # fmt: skip
    # A 40 s grace sweeps for leaks every 10 s tick, so listings meet faults too.
    w = make_world(provider=cloud, leak_grace="40s")
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(12)]
    for step in range(60):
        w.tick(10)
        if step % 7 == 3:
            for inst in cloud.running()[:2]:
                cloud.end(inst.id, EndReason.EXITED, exit_code=0)
    for inst in cloud.running():
        cloud.end(inst.id, EndReason.EXITED, exit_code=0)
    w.tick(10, n=10)
    assert cloud.faults.injected > 10
    assert {w.job(j).state for j in ids} == {JobState.SUCCEEDED}
    # No attempt ever had two instances: every instance belongs to exactly one attempt.
    with Session(w.rec.engine) as s:
        recorded = [a.instance_id for a in s.exec(select(Attempt)).all() if a.instance_id]
    assert len(recorded) == len(set(recorded)) == len(cloud.instances)


def test_deadline_policy_keeps_working_after_a_restart_when_its_zone_lost_capacity(make_world):
    w = make_world(
        offerings=[offering("us-east-1a", price=0.9), offering("us-east-1a", price=3.06,
                   market="on-demand")],
        policy={"deadline_policy": "spotwise"},
    )  # fmt: skip
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick()
    assert w.attempts(jid)[0].market == "spot"
    # The spot zone loses capacity and the daemon restarts (a fresh planner).
    w.provider.set_offerings([offering("us-east-1a", price=3.06, market="on-demand")])
    w.rec = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock)
    w.rec.poll_prices()
    w.tick(n=3)
    assert not w.events("step_failed")


def test_the_store_fence_only_moves_forward(tmp_path: Path) -> None:
    """A stale daemon (paused, then replaced) cannot hand the store back to an older attempt;
    a store reused by another job is claimed afresh."""
    stores = CheckpointStores()
    uri = f"file://{tmp_path}/ckpt"
    stores.claim(uri, 2, "a-2", "j-1")
    with pytest.raises(StoreError, match="owned by attempt 2"):
        stores.claim(uri, 1, "a-1", "j-1")
    assert contract.owner_attempt(stores.read(uri, contract.OWNER)) == 2
    stores.claim(uri, 2, "a-2", "j-1")  # the same claim again (a retried pass) is fine
    stores.claim(uri, 1, "b-1", "j-2")  # another job reusing the path
    assert contract.owner_attempt(stores.read(uri, contract.OWNER)) == 1


def test_a_call_queued_past_the_lease_is_never_made() -> None:
    """The lease is checked when each call leaves its provider's queue, not only when the
    batch starts: a call stuck behind slow ones must not run once a standby took over."""
    from scheduler.daemon.controllers.base import Clouds
    from scheduler.state.lease import LeaseLost

    class Lease:
        valid = True

        def check(self, s: Session) -> None:  # pragma: no cover - no writes here
            pass

        def guard(self) -> None:
            if not self.valid:
                raise LeaseLost("the lease was taken over")

    lease, release, ran = Lease(), threading.Event(), []

    def slow(_p):  # type: ignore[no-untyped-def]
        release.wait(10)
        return "slow"

    def queued(_p):  # type: ignore[no-untyped-def]
        ran.append(True)
        return "launched"

    cloud = FakeCloud([offering("us-east-1a")])
    clouds = Clouds({"fake": cloud}, timedelta(seconds=20), lease)
    calls = {f"busy{i}": ("fake", slow) for i in range(4)} | {"launch": ("fake", queued)}
    timer = threading.Timer(0.3, lambda: (setattr(lease, "valid", False), release.set()))
    timer.start()
    try:
        out = clouds.gather(calls)
    finally:
        timer.cancel()
        clouds.shutdown()
    assert not ran and isinstance(out["launch"].error, LeaseLost)
    assert all(out[f"busy{i}"].value == "slow" for i in range(4))
