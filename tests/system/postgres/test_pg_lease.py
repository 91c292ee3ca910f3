"""The lease on a real PostgreSQL server: one holder, takeover with epoch + 1 once expired,
and a stale holder whose every write and cloud call is rejected (fencing)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from scheduler.core.clock import SimClock
from scheduler.core.config import Config, DaemonSettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.states import JobState
from scheduler.daemon.checkpoints import StoreError
from scheduler.daemon.controllers.base import Clouds, Db, FencedStores, launching
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.lease import Lease, LeaseLost, LeaseTimings
from scheduler.state.models import Attempt, DaemonLease, Event, Job
from tests.support.fakes import NOW, FakeProvider, offering
from tests.system.postgres.conftest import FakeMonotonic, expire_lease

pytestmark = pytest.mark.timeout(120)
TIMINGS = LeaseTimings(ttl=30, renew=10, deadline=20, statement_timeout=0.5)
TIMINGS_CALL = __import__("datetime").timedelta(seconds=5)


@pytest.fixture
def db(pg_url):
    engine = open_db(pg_url)
    yield engine
    engine.dispose()


def _lease(url: str, **kw) -> Lease:
    return Lease(url, TIMINGS, "test", **kw)


def _row(engine) -> DaemonLease:
    with Session(engine) as s:
        row = s.get(DaemonLease, "daemon")
        assert row is not None
        return row


def _event(db: Db, message: str) -> None:
    with db.write() as s:
        s.add(Event(at=NOW, kind="test", message=message))


def _events(engine) -> list[str]:
    with Session(engine) as s:
        return [e.message for e in s.exec(select(Event).where(Event.kind == "test")).all()]


def test_one_holder_and_a_takeover_only_after_expiry_with_the_next_epoch(pg_url, db):
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire() and a.epoch is not None
    first = a.epoch
    assert not b.try_acquire()  # fresh: the standby waits
    assert a.renew() and not b.try_acquire()
    expire_lease(pg_url)
    assert b.try_acquire() and b.epoch == first + 1
    row = _row(db)
    assert (row.holder, row.epoch) == (b.holder, first + 1)
    assert not a.renew()
    assert a.lost is not None and f"epoch {first + 1}" in a.lost
    assert b.renew() and b.lost is None


def test_a_stale_holders_writes_are_rejected_in_their_own_transaction(pg_url, db):
    a, b = _lease(pg_url), _lease(pg_url)
    lost: list[str] = []
    a._on_lost = lost.append
    assert a.try_acquire()
    _event(Db(db, a), "a, holding")
    expire_lease(pg_url)
    assert b.try_acquire()
    # A still believes it holds the lease (its own clock says it renewed in time, as a
    # process paused by SIGSTOP would): the epoch check in the write's transaction says no.
    assert a.valid()
    with pytest.raises(LeaseLost, match="taken by"):
        _event(Db(db, a), "a, stale")
    assert _events(db) == ["a, holding"]
    assert len(lost) == 1 and not a.valid()
    with pytest.raises(LeaseLost):  # and from now on without asking the database
        _event(Db(db, a), "a, again")
    _event(Db(db, b), "b, holding")
    assert _events(db) == ["a, holding", "b, holding"]


def test_a_takeover_waits_for_the_holders_write_in_flight(pg_url, db):
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    expire_lease(pg_url)  # expired, but nobody has taken it yet: A may still write
    with Db(db, a).write() as s:
        s.add(Event(at=NOW, kind="test", message="in flight"))
        s.flush()
        # The row is locked FOR SHARE by A's transaction: the takeover cannot pass it.
        with pytest.raises(sa.exc.OperationalError, match="locking tuple"):
            b.try_acquire()
    assert _events(db) == ["in flight"]  # committed while A still held the lease
    assert b.try_acquire()
    with pytest.raises(LeaseLost):
        _event(Db(db, a), "after")


def test_a_long_write_transaction_does_not_block_the_holders_renewal(pg_url, db):
    """A write transaction open longer than the lease's statement timeout (a big batch on a
    big database) must not starve the holder's own renewals, yet still hold off a takeover."""
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    with Db(db, a).write() as s:
        s.add(Event(at=NOW, kind="test", message="long"))
        s.flush()
        assert a.renew() and a.lost is None  # was: lock timeout, a failed renewal
        assert a.renew() and a.lost is None
        expire_lease(pg_url)
        with pytest.raises(sa.exc.OperationalError, match="lock"):
            b.try_acquire()  # the takeover still waits for the write in flight
    assert _events(db) == ["long"]
    assert b.try_acquire()
    with pytest.raises(LeaseLost):
        _event(Db(db, a), "after")


def test_a_takeover_ends_the_expired_holders_open_transaction(pg_url, db):
    """A paused holder left a write transaction open, and the server does not end it by
    itself (idle_in_transaction_session_timeout does not fire after a pipelined executemany,
    as psycopg sends it; here the timeout is simply off): the standby ends that session by
    its name and takes over, and none of the open transaction lands."""
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    named = open_db(pg_url, application_name=a.session_name)
    other = open_db(pg_url)  # not A's: left alone
    held, untouched = named.connect(), other.connect()
    try:
        held.begin()
        held.execute(sa.text("SELECT epoch FROM daemonlease FOR KEY SHARE"))
        held.execute(
            sa.text("INSERT INTO event (at, level, kind, message) VALUES (:at, 'x', 'test', :m)"),
            {"at": NOW, "m": "open"},
        )
        untouched.execute(sa.text("SELECT 1"))
        expire_lease(pg_url)
        assert b.try_acquire()  # was: lock timeout, and again on every try
        assert (_row(db).holder, _row(db).epoch) == (b.holder, 2)
        with pytest.raises(sa.exc.OperationalError, match="administrator command"):
            held.execute(sa.text("SELECT 1"))
        assert untouched.execute(sa.text("SELECT 1")).scalar() == 1
        assert _events(db) == []
    finally:
        held.invalidate()
        untouched.close()
        named.dispose()
        other.dispose()


def test_a_live_holders_sessions_are_never_ended(pg_url, db):
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    named = open_db(pg_url, application_name=a.session_name)
    try:
        with named.connect() as c:
            assert not b.try_acquire()  # not expired: nothing is ended, nothing taken
            assert c.execute(sa.text("SELECT 1")).scalar() == 1
    finally:
        named.dispose()


def test_a_standby_polling_a_live_lease_waits_for_nothing(pg_url, db):
    """A poll of a lease that has not expired takes no lock: it neither waits behind the
    holder's long write transaction nor holds up the holder's renewals."""
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    with Db(db, a).write() as s:
        s.add(Event(at=NOW, kind="test", message="long"))
        s.flush()
        assert b.try_acquire() is False  # was: a lock timeout behind the write
        assert a.renew() and a.lost is None
    assert _events(db) == ["long"]


def test_the_first_daemon_creates_the_lease_and_a_second_waits(pg_url, db):
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire() and a.epoch == 1
    assert not b.try_acquire() and b.epoch is None
    assert (_row(db).holder, _row(db).epoch) == (a.holder, 1)


def test_past_its_deadline_a_holder_calls_no_cloud_and_writes_nothing(pg_url, db, tmp_path):
    clock = FakeMonotonic()
    lost: list[str] = []
    a = _lease(pg_url, monotonic=clock, on_lost=lost.append)
    assert a.try_acquire()
    fake = FakeProvider([offering()])
    clouds = Clouds({"fake": fake}, TIMINGS_CALL, a)
    stores = FencedStores(a)
    uri = (tmp_path / "ckpt").as_uri()
    stores.write(uri, "owner.json", "{}")  # in time: allowed
    clock.advance(TIMINGS.deadline - 0.1)
    assert a.valid()
    clock.advance(0.2)  # no renewal for lease_deadline: stop, before any standby can take over
    assert not a.valid() and lost and "lease_deadline" in lost[0]
    from providers.base import LaunchRequest

    req = LaunchRequest("tok", offering(), ["x"], {}, {})
    result = clouds.gather({"k": ("fake", launching(req))})["k"]
    assert isinstance(result.error, LeaseLost) and fake.launch_calls == 0
    with pytest.raises(StoreError, match="not the lease holder"):
        stores.write(uri, "owner.json", '{"attempt": 9}')
    assert (tmp_path / "ckpt" / "owner.json").read_text() == "{}"
    with pytest.raises(LeaseLost):
        _event(Db(db, a), "late")
    assert _events(db) == []
    assert not a.renew()  # lost stays lost: the daemon exits and comes back as a standby
    assert len(lost) == 1


def test_a_clean_stop_hands_over_at_once(pg_url, db):
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    a.release()
    assert _row(db).status == "stopped"
    assert b.try_acquire()
    with pytest.raises(LeaseLost):
        _event(Db(db, a), "after release")


def test_the_renewal_thread_keeps_the_lease_and_a_standby_waits(pg_url, db):
    fast = LeaseTimings(ttl=1.2, renew=0.2, deadline=0.8, statement_timeout=0.1)
    a = Lease(pg_url, fast, "test")
    assert a.try_acquire()
    a.start()
    b = Lease(pg_url, fast, "test")
    stop = threading.Event()
    seen: list[object] = []

    def waiting(hb) -> None:
        seen.append(hb)
        if len(seen) >= 8:  # 8 polls, 1.6 s: longer than the TTL, the renewals kept it
            stop.set()

    assert not b.wait_acquire(stop, waiting)
    assert a.valid() and _row(db).holder == a.holder
    a.close()  # stops renewing (as if the process died): the standby takes over
    assert b.wait_acquire(threading.Event())
    assert _row(db).holder == b.holder


def _reconciler(engine, fake, clock, lease: Lease, tmp_path) -> Reconciler:
    # The engine is given: the URL is never opened.
    cfg = Config(daemon=DaemonSettings(database_url="postgresql://unused/x", accrue_interval="30s"))
    rec = Reconciler(engine, cfg, {"fake": fake}, clock, fence=lease)
    rec.poll_prices()
    return rec


def test_a_stale_holder_launches_nothing_and_the_new_holder_launches_once(pg_url, db, tmp_path):
    clock = SimClock(NOW)
    fake = FakeProvider([offering("us-east-1a", price=0.9)])
    fake.clock = clock
    a, b = _lease(pg_url), _lease(pg_url)
    assert a.try_acquire()
    old = _reconciler(db, fake, clock, a, tmp_path)
    expire_lease(pg_url)
    assert b.try_acquire()
    new = _reconciler(db, fake, clock, b, tmp_path)
    job = submit(
        db,
        jobspec_from_dict({"name": "j", "command": ["train"], "gpus": "V100:1"}),
        clock.now(),
        (tmp_path / "ckpt").as_uri(),
    )
    clock.advance(5)
    old.reconcile()  # it still thinks it holds the lease: the intent write is rejected
    assert fake.launch_calls == 0
    with Session(db) as s:
        assert s.exec(select(Attempt)).all() == []
        assert s.get(Job, job.id).state is JobState.PENDING
    new.reconcile()
    old.reconcile()
    new.reconcile()
    assert fake.launch_calls == 1 and len(fake.instances) == 1
    with Session(db) as s:
        assert s.get(Job, job.id).state is JobState.RUNNING
        assert len(s.exec(select(Attempt)).all()) == 1
