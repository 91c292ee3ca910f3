"""A hard budget holds while another cloud is slow: the stop that keeps it goes out on its
own thread as soon as enforcement asks for it, not when a pass stuck on the slow cloud's
calls reaches its stop step; and the watchdog knows a slow pass from a wedged one."""

from __future__ import annotations

import threading
import time

import pytest
from sqlmodel import Session

from scheduler.core.clock import SimClock
from scheduler.core.config import BudgetSettings, Config, DaemonSettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.models import Attempt, Job
from tests.support.fakes import NOW, FakeProvider, offering


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_hard_budget_holds_while_another_cloud_hangs(tmp_path):
    """A pass is stuck on the slow cloud's describe; meanwhile the accrue task finds the
    fast cloud's job about to cross its hard budget. The stop must reach the fast cloud
    while the pass is still stuck (it used to wait for the pass: $0.075 over $0.05 here)."""
    clock = SimClock(NOW)
    fast = FakeProvider([offering("us-east-1a", price=0.9)], name="fast")
    slow = FakeProvider([offering("us-central1-a", price=0.5, cloud="gcp")], name="slow")
    for cloud in (fast, slow):
        cloud.clock = clock
    url = f"sqlite:///{tmp_path}/db.sqlite"
    daemon = DaemonSettings(
        database_url=url,
        state_dir=tmp_path,
        call_timeout="30s",
        accrue_interval="30s",
        stop_grace="30s",
    )
    rec = Reconciler(open_db(url), Config(daemon=daemon), {"fast": fast, "slow": slow}, clock)
    rec.poll_prices()
    for name, cloud in (("a", "aws"), ("b", "gcp")):
        spec = jobspec_from_dict({"name": name, "command": ["t"], "clouds": [cloud]})
        submit(rec.engine, spec, clock.now(), (tmp_path / "ckpt").as_uri())
    for seconds in (5, 5, 3600):
        clock.advance(seconds)
        rec.reconcile()
        rec.accrue()
    assert len(fast.running()) == 1 and len(slow.running()) == 1
    with Session(rec.engine) as s:
        a_id = f"{_job_id(s, 'a')}-a1"
        paid = s.get(Attempt, a_id).cost_usd
    # $0.05 left: three more minutes at $0.90/h; enforcement stops it at +3 min (it
    # keeps a minute of headroom: accrue_interval + stop_grace).
    limit = round(paid + 0.05, 6)
    budget = BudgetSettings(name="a", scope="job:a", limit_usd=limit, window="total")
    rec.config = Config(daemon=daemon, budgets=[budget])

    entered, release = threading.Event(), threading.Event()
    real = slow.describe

    def hanging(refs):  # type: ignore[no-untyped-def]
        entered.set()
        release.wait(20)
        return real(refs)

    slow.describe = hanging  # type: ignore[method-assign]
    stop = threading.Event()
    stuck = threading.Thread(target=rec.reconcile, daemon=True)  # one pass, stuck on slow
    # What the daemon starts beside its APScheduler tasks.
    stops = threading.Thread(target=rec.budget_stops.run, args=(stop,), daemon=True)
    stuck.start()
    stops.start()
    try:
        assert entered.wait(10)
        for _ in range(5):  # five market minutes of the accrue task while the pass hangs
            clock.advance(60)
            rec.accrue()
            end = time.monotonic() + 1.0
            while fast.running() and time.monotonic() < end:
                time.sleep(0.02)
        stopped_while_stuck = not fast.running() and stuck.is_alive()
    finally:
        release.set()
        stuck.join(20)
        stop.set()
        rec.budget_stops.wake()
        stops.join(20)
    assert stopped_while_stuck, "the budget stop waited for the pass stuck on the slow cloud"
    for _ in range(2):
        clock.advance(5)
        rec.reconcile()
        rec.accrue()
    with Session(rec.engine) as s:
        a = s.get(Attempt, a_id)
    assert a.state is AttemptState.ENDED and a.end_reason is AttemptEnd.BUDGET
    assert a.cost_usd <= limit, f"${a.cost_usd:.4f} spent against a ${limit:.4f} hard budget"
    assert len(slow.running()) == 1  # the slow cloud's job was never touched


def _job_id(s: Session, name: str) -> str:
    from sqlmodel import select

    return s.exec(select(Job.id).where(Job.name == name)).one()


def test_the_watchdog_is_fed_while_a_slow_pass_is_inside_its_bound(tmp_path):
    """A pass waiting on a hanging cloud is not a hang: the watchdog is fed while it is
    within 10 x call_timeout + 35 s, and not after (a wedged loop is restarted)."""
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon, pass_bound

    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\ncall_timeout = "60s"\n')
    daemon = Daemon(cfg, clock=SimClock())
    daemon.lock.release()
    assert pass_bound(daemon.config.daemon) == 10 * 60 + 5 + 30
    t0 = 1000.0
    daemon._last_pass, daemon._pass_started = t0, t0
    assert daemon._alive(t0 + 100, watchdog=120)
    assert daemon._alive(t0 + 500, watchdog=120)  # slow, not wedged
    assert not daemon._alive(t0 + 700, watchdog=120)
    daemon._pass_started = None
    assert not daemon._alive(t0 + 500, watchdog=120)  # no pass running, none finished
