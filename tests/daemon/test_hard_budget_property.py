"""Property: a hard budget is never overrun by the daemon's real controllers.

Random jobs, random spot-price drift (polled between passes), terminations that take up to
the stop grace, accrual passes that are delayed or skipped, and daemon restarts (a new
Reconciler over the same database and cloud: nothing in memory survives). Spend is what the
instances ran, at the prices in effect; the assertion is on that, summed from the buckets,
and cross-checked against the fake cloud's own record of when each instance ran.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import Session, select

from providers.base import EndReason, Market
from providers.fake import FakeCloud
from scheduler.core.clock import SimClock
from scheduler.core.config import BudgetSettings, Config, DaemonSettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.models import Attempt, SpendBucket
from tests.support.fakes import NOW, offering

pytestmark = pytest.mark.slow  # a long property run

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")

step = st.tuples(
    st.sampled_from(["pass", "pass", "pass", "skip_accrue", "restart", "drift", "finish"]),
    st.integers(1, 6),  # how many reconcile intervals pass before it
    st.floats(0.7, 1.4),  # the drift factor
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    limit=st.floats(0.02, 0.6),
    prices=st.lists(st.floats(0.5, 4.0), min_size=3, max_size=3),
    jobs=st.integers(1, 4),
    terminate_s=st.integers(0, 30),
    steps=st.lists(step, min_size=10, max_size=40),
)
def test_hard_budget_never_overrun(tmp_path_factory, limit, prices, jobs, terminate_s, steps):
    tmp = tmp_path_factory.mktemp("budget")
    clock = SimClock(NOW)
    offers = [offering(z, price=p) for z, p in zip(ZONES, prices, strict=True)]
    offers.append(offering("us-east-1a", price=5.0, market=Market.ON_DEMAND))
    cloud = FakeCloud(offers, clock=clock, start_running=True)
    cloud.terminate_delay = timedelta(seconds=terminate_s)  # within the 30 s stop grace
    url = f"sqlite:///{tmp}/db.sqlite"
    cfg = Config(
        daemon=DaemonSettings(
            database_url=url, state_dir=tmp, reconcile_interval="5s", accrue_interval="30s",
            stop_grace="30s", leak_grace="1h",
        ),
        budgets=[BudgetSettings(name="cap", limit_usd=limit, window="total", hard=True)],
    )  # fmt: skip
    engine = open_db(url)
    for i in range(jobs):
        spec = jobspec_from_dict({"name": f"j{i}", "command": ["x"], "gpus": "V100:1"})
        submit(engine, spec, clock.now(), (tmp / "ckpt").as_uri())

    def daemon() -> Reconciler:
        rec = Reconciler(engine, cfg, {"fake": cloud}, clock)
        rec.poll_prices()
        rec.accrue()  # as the daemon starts: budgets first
        return rec

    rec = daemon()
    since_accrue = 0.0
    for kind, intervals, factor in steps:
        clock.advance(5 * intervals)
        since_accrue += 5 * intervals
        if kind == "restart":
            rec = daemon()
            since_accrue = 0.0
        elif kind == "drift":
            cloud.set_offerings([
                offering(o.zone, price=round(o.price_per_hour * factor, 4))
                if o.market is Market.SPOT else o
                for o in offers
            ])  # fmt: skip
            rec.poll_prices()
        elif kind == "finish" and cloud.running():
            cloud.end(cloud.running()[0].id, EndReason.EXITED, exit_code=0)
        rec.reconcile()
        if kind != "skip_accrue" and since_accrue >= 30:
            rec.accrue()
            since_accrue = 0.0
    for _ in range(20):  # let every stop complete
        clock.advance(5)
        rec.reconcile()
    rec.accrue()

    with Session(engine) as s:
        spent = sum(b.usd for b in s.exec(select(SpendBucket)).all())
        attempts = s.exec(select(Attempt)).all()
    assert spent <= limit + 1e-9, f"spent ${spent:.4f} of a ${limit:.4f} hard budget"
    # The buckets are what the instances ran: every attempt's cost is inside its run.
    for a in attempts:
        if a.started_at is None:
            assert a.cost_usd == 0
            continue
        inst = cloud.instances[a.instance_id]
        assert inst.launched_at is not None
        end = inst.ended_at or clock.now()
        ran_h = (end - inst.launched_at).total_seconds() / 3600
        top = max(prices) * 1.4 ** len(steps)
        assert -1e-9 <= a.cost_usd <= top * ran_h + 1e-9
