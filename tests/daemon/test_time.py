"""Time only moves forward: a clock stepped back never bills backwards nor stops billing,
accrual reads its time inside the write lock, the last reading is kept in the database and a
daemon whose clock is far behind it refuses to start, and the keys that move the daemon's
clock (the local market's speedup, trace and start, a cloud beside it) need a restart."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from scheduler.core.clock import SimClock
from scheduler.core.config import parse_config
from scheduler.core.errors import UserError
from scheduler.core.states import AttemptState
from scheduler.daemon.process import Daemon, restart_only_changes
from scheduler.state.db import open_db
from scheduler.state.models import Attempt, SpendBucket
from tests.support.fakes import NOW


def _running(w) -> Attempt:  # type: ignore[no-untyped-def]
    jid = w.submit(gpus="V100:1")
    w.tick(n=2)  # launched, then observed
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING
    return a


def test_a_clock_stepped_back_across_an_hour_never_bills_backwards_nor_fails(make_world):
    w = make_world()
    a = _running(w)
    w.tick(3600)  # 01:00:10: the 01:00 bucket now exists
    cost = w.attempts(a.job_id)[0].cost_usd
    w.clock.advance(-600)  # NTP steps back to 00:50:10, across the hour
    w.rec.accrue()  # raised IntegrityError (a second 00:00 bucket), every accrual
    w.rec.poll_prices()  # the price poll accrues too: it failed the same way
    w.rec.reconcile()
    after = w.attempts(a.job_id)[0]
    assert after.cost_usd == pytest.approx(cost)  # nothing refunded for time that ran
    w.tick(1200)  # 01:10:10: billing goes on from where it was
    again = w.attempts(a.job_id)[0]
    assert again.cost_usd == pytest.approx(cost + 0.9 * 600 / 3600)
    with Session(w.rec.engine) as s:
        total = s.exec(sa.select(sa.func.sum(SpendBucket.usd))).one()[0]
    assert total == pytest.approx(again.cost_usd)


class _Watched(SimClock):
    """A SimClock that says when a thread reads it."""

    def __init__(self, start) -> None:  # type: ignore[no-untyped-def]
        super().__init__(start)
        self.read_by: set[str] = set()
        self.read = threading.Event()

    def now(self):  # type: ignore[no-untyped-def]
        self.read_by.add(threading.current_thread().name)
        if threading.current_thread().name == "accrual":
            self.read.set()
        return super().now()


def test_accrual_reads_the_time_inside_the_write_lock(make_world):
    """An accrual that waited for the lock behind a pass must bill up to when it writes,
    not up to when it started waiting (the pass may have written a later time)."""
    w = make_world()
    clock = _Watched(w.clock.now())
    w.rec.spend.clock = clock
    a = _running(w)
    with w.rec.db._lock:  # a pass holds the write lock
        t = threading.Thread(target=w.rec.spend.accrue, name="accrual")
        t.start()
        clock.read.wait(0.5)  # the old accrual read the time here, before the lock
        clock.advance(30)
    t.join(10)
    assert w.attempts(a.job_id)[0].accrued_until == clock.now()


def test_the_clock_reading_is_kept_and_a_clock_far_behind_it_refuses_to_start(tmp_path):
    from scheduler.state.models import Installation

    url = f"sqlite:///{tmp_path}/spotwise.db"
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\ndatabase_url = "{url}"\n')
    clock = SimClock(NOW)
    daemon = Daemon(cfg, clock=clock)
    clock.advance(3600)
    daemon._run_task("accrue")
    _stopped(daemon)
    with Session(open_db(url)) as s:
        assert s.get(Installation, 1).clock_reading == NOW + timedelta(hours=1)

    with pytest.raises(UserError) as e:  # the clock stepped back two hours since
        Daemon(cfg, clock=SimClock(NOW - timedelta(hours=1)))
    msg = str(e.value)
    assert "\n" not in msg and "behind" in msg and "refusing to start" in msg

    # Within the tolerance it starts, and its time never reads earlier than the record.
    daemon = Daemon(cfg, clock=SimClock(NOW + timedelta(minutes=58)))
    assert daemon.clock.now() == NOW + timedelta(hours=1)
    _stopped(daemon)


def _stopped(daemon: Daemon) -> None:
    """As if the daemon had exited (its heartbeat stale, its lock free)."""
    from scheduler.state.models import DaemonLease

    daemon.lock.release()
    with Session(daemon.engine) as s:
        row = s.get(DaemonLease, "daemon")
        row.renewed_at -= timedelta(days=1)
        s.add(row)
        s.commit()


def test_a_forward_clock_never_reads_earlier_than_it_did():
    from scheduler.core.clock import ForwardClock

    inner = SimClock(NOW)
    clock = ForwardClock(inner)
    assert clock.now() == NOW
    inner.advance(-30)
    assert clock.now() == NOW
    inner.advance(60)
    assert clock.now() == NOW + timedelta(seconds=30)


def test_keys_that_move_the_daemons_clock_need_a_restart(tmp_path):
    base = f'[daemon]\nstate_dir = "{tmp_path}"\n[providers.local]\n'
    old = parse_config(base + "speedup = 60\n")
    assert restart_only_changes(old, parse_config(base + "speedup = 120\n")) == [
        "providers.local.speedup"
    ]
    assert restart_only_changes(old, parse_config(base + 'speedup = 60\ntrace_start = "6h"\n')) == [
        "providers.local.trace_start"
    ]
    aws = '[providers.aws]\nregions = ["us-east-1"]\n'
    # A cloud beside the market is allowed only where the config says so (beside_clouds).
    with_aws = parse_config(base + "speedup = 60\nbeside_clouds = true\n" + aws)
    assert restart_only_changes(old, with_aws) == ["providers.aws"]
    assert restart_only_changes(with_aws, old) == ["providers.aws"]
    # Without the local market, a cloud may come and go on a reload.
    only_aws = parse_config(f'[daemon]\nstate_dir = "{tmp_path}"\n' + aws)
    gcp = '[providers.gcp]\nproject = "p"\n'
    both = parse_config(f'[daemon]\nstate_dir = "{tmp_path}"\n' + aws + gcp)
    assert restart_only_changes(only_aws, both) == []
