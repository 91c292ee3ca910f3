"""A restart or an outage never bills, stops or holds on spend that did not happen: live
attempts accrue up to their cloud's last observation, a budget hold is released when the
spend that caused it is refunded, and an instance the cloud took back before our stop keeps
the cloud's end reason."""

from __future__ import annotations

from providers.base import EndReason, TransientError
from scheduler.core.states import AttemptEnd, JobState

BUDGET = [{"name": "all", "limit_usd": 10.0, "window": "total"}]


def _two_running(w) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    a = w.submit(name="a", gpus="V100:1")
    b = w.submit(name="b", gpus="V100:1")
    w.tick(n=2)  # launched, then observed
    assert w.job(a).state is JobState.RUNNING and w.job(b).state is JobState.RUNNING
    return a, b


def test_after_an_outage_nothing_is_billed_or_stopped_before_the_instances_are_seen(make_world):
    """Both jobs at $0.90/h under a $10 budget; the daemon is down 6 h and one job's
    instance was taken back after 1 h. $10.80 if both are billed to now before anything
    is observed (both stopped and HELD, the interruption recorded as `budget`); $6.30 paid."""
    w = make_world(budgets=BUDGET)
    a, b = _two_running(w)
    (first,) = w.attempts(a)
    w.clock.advance(3600)
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    taken_back = w.clock.now()
    w.clock.advance(5 * 3600)
    # The daemon starts again in its own order: a price poll, an accrual, then a pass.
    w.rec.poll_prices()
    w.rec.accrue()
    w.rec.reconcile()
    w.rec.accrue()
    assert not w.events("budget_stop")
    assert w.job(b).state is JobState.RUNNING
    ended = w.attempts(a)[0]
    assert ended.end_reason is AttemptEnd.INTERRUPTED and ended.ended_at == taken_back
    w.tick()
    assert w.job(a).state in (JobState.LAUNCHING, JobState.RUNNING)
    with w.rec.db.read() as s:
        (budget,) = w.rec.spend.statuses(s, w.clock.now())
    assert budget.spent < 6.5


def test_a_refund_releases_the_hold_it_caused_and_the_cloud_keeps_its_end_reason(
    make_world, monkeypatch
):
    """The cloud's API fails for hours: after a few failed passes spend runs to now again
    (a hard budget must hold while a cloud cannot be watched), crosses $10 and stops both
    jobs. When describe answers, one had been taken back long before: the refund brings the
    spend under the limit, the other job's hold is released, and the taken-back attempt
    ended `interrupted`, not `budget`."""
    w = make_world(budgets=BUDGET)
    a, b = _two_running(w)
    (first,) = w.attempts(a)
    real = w.provider.describe

    def down(refs):  # type: ignore[no-untyped-def]
        raise TransientError("fake: describe is down")

    monkeypatch.setattr(w.provider, "describe", down)
    w.clock.advance(3600)
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    w.tick_until(lambda: w.job(b).state is JobState.HELD, seconds=600, limit=60)
    assert w.job(b).state is JobState.HELD
    assert len(w.events("describe_failed")) == 1  # once per reason, not every pass
    monkeypatch.setattr(w.provider, "describe", real)
    w.tick(n=3)
    assert w.attempts(a)[0].end_reason is AttemptEnd.INTERRUPTED
    assert w.attempts(b)[0].end_reason is AttemptEnd.BUDGET
    assert w.job(b).state is not JobState.HELD
    (released,) = [e for e in w.events("released") if e.job_id == b]
    assert "refunded" in released.message
    with w.rec.db.read() as s:
        (budget,) = w.rec.spend.statuses(s, w.clock.now())
    assert budget.spent < 10.0
