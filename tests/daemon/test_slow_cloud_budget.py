"""A hard budget holds while another cloud is slow: the stop that keeps it goes out on its
own thread as soon as enforcement asks for it, not when a pass stuck on the slow cloud's
calls reaches its stop step."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from sqlmodel import Session

from scheduler.core.clock import ScaledClock
from scheduler.core.config import BudgetSettings, Config, DaemonSettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.models import Attempt, Job
from tests.support.fakes import FakeProvider, offering


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_hard_budget_holds_while_another_cloud_hangs(tmp_path):
    # Five market minutes per real second: the $0.50 budget of a $0.90/h job lasts ~7 s.
    # Enforcement stops it 4 market minutes (0.8 real s) short of the limit; a stop that
    # waits for a pass stuck 2 s on the slow cloud goes out 10 market minutes late.
    clock = ScaledClock(datetime.now(UTC), 300)
    fast = FakeProvider([offering("us-east-1a", price=0.9)], name="fast")
    slow = FakeProvider([offering("us-central1-a", price=0.5, cloud="gcp")], name="slow")
    for cloud in (fast, slow):
        cloud.clock = clock
    url = f"sqlite:///{tmp_path}/db.sqlite"
    cfg = Config(
        daemon=DaemonSettings(
            database_url=url,
            state_dir=tmp_path,
            call_timeout="2s",
            accrue_interval="2m",
            stop_grace="2m",
            reconcile_interval="5s",
        ),
        budgets=[BudgetSettings(name="a", scope="job:a", limit_usd=0.5, window="total")],
    )
    rec = Reconciler(open_db(url), cfg, {"fast": fast, "slow": slow}, clock)
    rec.poll_prices()
    for name, cloud in (("a", "aws"), ("b", "gcp")):
        spec = jobspec_from_dict({"name": name, "command": ["t"], "clouds": [cloud]})
        submit(rec.engine, spec, clock.now(), (tmp_path / "ckpt").as_uri())
    rec.reconcile()
    rec.reconcile()
    assert len(fast.running()) == 1 and len(slow.running()) == 1
    slow.faults.stall_s["describe"] = 6.0  # every pass now waits 2 s on the slow cloud

    done = threading.Event()
    daemon_stop = threading.Event()

    def passes() -> None:
        while not done.is_set():
            rec.reconcile()

    threads = [
        threading.Thread(target=passes, daemon=True),
        # What the daemon starts beside its APScheduler tasks.
        threading.Thread(target=rec.budget_stops.run, args=(daemon_stop,), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        start = time.monotonic()
        while fast.running() and time.monotonic() - start < 25:
            rec.accrue()  # the accrue task, every 15 market seconds here
            time.sleep(0.05)
        assert not fast.running(), "the budget never stopped the job"
        # The job's instance ended when its terminate arrived: billed up to then.
        end = time.monotonic()
        while time.monotonic() - end < 10:
            with Session(rec.engine) as s:
                a = s.get(Attempt, f"{_job_id(s, 'a')}-a1")
            if a.state is AttemptState.ENDED:
                break
            time.sleep(0.1)
    finally:
        done.set()
        daemon_stop.set()
        rec.budget_stops.wake()
        for t in threads:
            t.join(15)
    assert a.state is AttemptState.ENDED and a.end_reason is AttemptEnd.BUDGET
    assert a.cost_usd <= 0.5, f"${a.cost_usd:.2f} spent against a $0.50 hard budget"
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
