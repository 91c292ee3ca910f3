"""Costs that do not grow with history, and logs that do not repeat: a budget's status is a
running total (no SUM over its window's buckets at every accrual and pass), buckets have a
retention that changes no budget, and a failing provider's listing or terminate is said
once per reason, not every pass."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from providers.base import TransientError
from scheduler.core.states import JobState
from scheduler.state.models import BudgetSpend, SpendBucket
from scheduler.state.retention import prune
from tests.support.fakes import NOW

BUDGETS = [
    {"name": "all", "limit_usd": 1000.0, "window": "total"},
    {"name": "month", "limit_usd": 1000.0, "window": "month"},
    {"name": "ml", "scope": "team:ml", "limit_usd": 1000.0, "window": "day"},
]


def _history(w, n: int) -> None:  # type: ignore[no-untyped-def]
    """An old, finished job of team ml, $0.01 an hour for n hours before NOW: its job and
    attempt rows and its n hourly buckets, what years of spend leave behind."""
    cost = round(0.01 * n, 9)
    rows = [
        {
            "hour": NOW - timedelta(hours=i + 1),
            "attempt_id": "j-old-a1",
            "job_id": "j-old",
            "job_name": "old",
            "team": "ml",
            "cloud": "aws",
            "usd": 0.01,
        }
        for i in range(n)
    ]
    t = {"t": NOW - timedelta(hours=n), "e": NOW, "c": cost}
    with Session(w.rec.engine) as s:
        s.execute(
            sa.text(
                "INSERT INTO job (id, name, team, spec_json, state, reason, checkpoint_uri, "
                "created_at, updated_at, cancel_requested, attempts, recoveries, failures, "
                "step_failures, last_error, cost_usd, settled_attempt) VALUES ('j-old', 'old', "
                "'ml', '{}', 'SUCCEEDED', '', 'file:///x', :t, :t, 0, 1, 0, 0, 0, '', :c, "
                "'j-old-a1')"
            ),
            t,
        )
        s.execute(
            sa.text(
                "INSERT INTO attempt (id, job_id, number, token, provider, cloud, region, zone, "
                "instance_type, market, pool, price_per_hour, gpu_count, nodes, state, "
                "instance_scope, created_at, started_at, ended_at, accrued_until, end_reason, "
                "detail, cost_usd) VALUES ('j-old-a1', 'j-old', 1, 't-old', 'fake', 'aws', "
                "'us-east-1', 'us-east-1a', 'p3.2xlarge', 'spot', 'aws/us-east-1a/p3.2xlarge/"
                "spot', 0.01, 1, 1, 'ENDED', '', :t, :t, :e, :e, 'finished', '', :c)"
            ),
            t,
        )
        s.execute(sa.insert(SpendBucket.__table__), rows)  # type: ignore[attr-defined]
        # As a database upgraded to running totals: each is built once from this history.
        s.execute(sa.update(BudgetSpend.__table__).values(accrued_key=""))  # type: ignore[attr-defined]
        s.commit()


def _bucket_sums(w):  # type: ignore[no-untyped-def]
    seen: list[str] = []

    def note(conn, cursor, statement, *_):  # type: ignore[no-untyped-def]
        text = statement.lower()
        if "spendbucket" in text and "sum(" in text:
            seen.append(statement)

    sa.event.listen(w.rec.engine, "before_cursor_execute", note)
    return seen


def test_budget_status_reads_a_running_total_not_the_windows_buckets(make_world):
    w = make_world(budgets=BUDGETS)
    _history(w, 2000)
    jid = w.submit(gpus="V100:1", team="ml")
    w.tick(n=2)  # the first accrual builds each total once
    sums = _bucket_sums(w)
    w.tick(600, n=6)  # an hour of passes, accruals and price polls
    w.rec.poll_prices()
    assert sums == []  # none of them summed the buckets
    with w.rec.db.read() as s:
        statuses = {st.rule.name: st.spent for st in w.rec.spend.statuses(s, w.clock.now())}
    # The totals are what the buckets say, window by window.
    with Session(w.rec.engine) as s:
        every = s.exec(select(sa.func.sum(SpendBucket.usd))).one()
        today = s.exec(
            select(sa.func.sum(SpendBucket.usd)).where(
                SpendBucket.hour >= NOW.replace(hour=0), SpendBucket.team == "ml"
            )
        ).one()
    assert statuses["all"] == pytest.approx(every, rel=1e-9)
    assert statuses["ml"] == pytest.approx(today, rel=1e-9)
    assert w.job(jid).state is JobState.RUNNING
    # A new day: the day's total starts again (rebuilt once from its own buckets).
    w.clock.advance(24 * 3600)
    w.tick()
    with Session(w.rec.engine) as s:
        day = s.get(BudgetSpend, "ml")
    assert day.accrued_usd == pytest.approx(0.9 * (w.clock.now() - day.window_start).seconds / 3600)


def test_spend_buckets_are_pruned_after_their_retention_and_no_budget_changes(make_world):
    w = make_world(budgets=BUDGETS, spend_retention="40d")
    _history(w, 24 * 60)  # sixty days of an old job's buckets
    w.tick()
    with w.rec.db.read() as s:
        before = {st.rule.name: st.spent for st in w.rec.spend.statuses(s, w.clock.now())}
    cutoff = w.clock.now() - timedelta(days=40)
    with Session(w.rec.engine) as s:
        old = s.exec(select(sa.func.count()).where(SpendBucket.hour < cutoff)).one()
    out = prune(w.rec.engine, w.clock.now(), w.rec.config.daemon, {})
    assert out["spend_buckets"] == old and old >= 24 * 20  # the twenty days past forty
    with w.rec.db.read() as s:
        after = {st.rule.name: st.spent for st in w.rec.spend.statuses(s, w.clock.now())}
    assert after == pytest.approx(before)
    assert before["all"] == pytest.approx(14.4)
    # A budget added later, over all time, is built from the attempts' costs (kept).
    from scheduler.core.config import BudgetSettings

    cfg = w.rec.config.model_copy(
        update={
            "budgets": [
                *w.rec.config.budgets,
                BudgetSettings(name="late", limit_usd=99, window="total"),
            ]
        }
    )
    w.rec.config = cfg
    w.tick()
    with w.rec.db.read() as s:
        late = {st.rule.name: st.spent for st in w.rec.spend.statuses(s, w.clock.now())}
    assert late["late"] == pytest.approx(14.4)


def test_a_failing_listing_and_terminate_are_said_once_per_reason(make_world, monkeypatch):
    w = make_world(leak_grace="1m", stop_grace="30s")
    jid = w.submit(gpus="V100:1")
    w.tick(n=2)

    def down(*_):  # type: ignore[no-untyped-def]
        raise TransientError("fake: the API is down")

    monkeypatch.setattr(w.provider, "list_tagged", down)
    monkeypatch.setattr(w.provider, "terminate", down)
    from scheduler.state.desired import cancel

    cancel(w.rec.engine, jid, w.clock.now())
    w.tick(60, n=20)  # twenty minutes of passes, sweeps and re-sent stops
    assert len(w.events("list_failed")) == 1
    assert len(w.events("terminate_failed")) == 1
    monkeypatch.undo()
    w.tick(60, n=2)
    assert w.job(jid).state is JobState.CANCELLED


def test_a_user_budgets_running_total_counts_only_that_users_jobs(make_world):
    """A `user:NAME` budget's running total adds what that user's jobs accrue, and agrees
    with the buckets of the jobs the user submitted, as it is rebuilt for a new window."""
    from scheduler.core.jobspec import jobspec_from_dict
    from scheduler.state.desired import submit
    from scheduler.state.models import Job

    budgets = [{"name": "alice", "scope": "user:alice", "limit_usd": 1000.0, "window": "day"}]
    w = make_world(budgets=budgets)
    for who, name in (("alice", "a"), ("bob", "b")):
        spec = jobspec_from_dict({"name": name, "command": ["t"], "gpus": "V100:1"})
        submit(w.rec.engine, spec, w.clock.now(), (w.tmp / name).as_uri(), who)
    w.tick(n=2)
    w.tick(600, n=6)
    with w.rec.db.read() as s:
        (status,) = w.rec.spend.statuses(s, w.clock.now())
    with Session(w.rec.engine) as s:
        mine = select(Job.id).where(Job.submitted_by == "alice")
        alices = s.exec(
            select(sa.func.sum(SpendBucket.usd)).where(sa.column("job_id").in_(mine))
        ).one()
        everyone = s.exec(select(sa.func.sum(SpendBucket.usd))).one()
        total = s.get(BudgetSpend, "alice")
    assert alices > 0 and everyone > 1.9 * alices
    assert total.accrued_usd == pytest.approx(alices, rel=1e-9)
    assert status.spent == pytest.approx(alices, rel=1e-6)
