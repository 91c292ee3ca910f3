"""Budget alerts: each threshold of a window's limit once, a forecast of the day the limit
is reached, written as events, logged at warning, counted in the metrics and sent to a
webhook with retries from their own thread, never holding up a pass; and budgets scoped to
the person who submitted (`user:NAME`)."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import generate_latest
from sqlmodel import Session, select

from scheduler.core.config import AlertSettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.daemon.metrics import Metrics
from scheduler.daemon.webhook import WebhookSender
from scheduler.state import read_models
from scheduler.state.desired import submit
from scheduler.state.models import BudgetSpend, WebhookDelivery

DEC13 = datetime(2026, 12, 13, 12, 0, tzinfo=UTC)


def _publish(w, name: str, scope: str, spent: float, burn: float, limit: float = 500.0) -> None:
    with Session(w.rec.engine) as s:
        row = s.get(BudgetSpend, name) or BudgetSpend(
            name=name, scope=scope, window="month", limit_usd=limit, hard=False, updated_at=DEC13
        )
        row.spent_usd, row.burn_per_hour = spent, burn
        row.window_start = datetime(2026, 12, 1, tzinfo=UTC)
        s.add(row)
        s.commit()


def _alerts(w) -> list[str]:
    return [e.message for e in w.events("budget_alert")]


def test_each_threshold_once_per_window_and_the_forecast(make_world, caplog) -> None:
    w = make_world()
    w.clock.now = lambda: DEC13  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, logger="spotwise")
    _publish(w, "research", "team:research", spent=212.0, burn=2.1)
    assert w.rec.alerts.check() == 1
    (forecast,) = _alerts(w)
    assert forecast.startswith(
        "team research will reach its monthly limit ($500.00) on the 19th (05:08 UTC) at this "
        "rate ($2.10/h, $212.00 spent"
    )
    _publish(w, "research", "team:research", spent=420.0, burn=2.1)
    assert w.rec.alerts.check() == 2  # 50% and 80% at once; the forecast was said already
    assert w.rec.alerts.check() == 0
    _publish(w, "research", "team:research", spent=501.0, burn=0.0)
    assert w.rec.alerts.check() == 1
    said = _alerts(w)
    assert [m.split(" reached ")[1][:4] for m in said[1:]] == ["50% ", "80% ", "100%"]
    assert said[3] == (
        "team research reached 100% of its monthly limit ($501.00 of $500.00, budget 'research')"
    )
    assert all(e.level == "warning" for e in w.events("budget_alert"))
    assert sum("budget_alert" in r.getMessage() for r in caplog.records) == 4
    # A new window: the thresholds count again.
    with Session(w.rec.engine) as s:
        row = s.get(BudgetSpend, "research")
        row.window_start, row.spent_usd = datetime(2027, 1, 1, tzinfo=UTC), 260.0
        s.add(row)
        s.commit()
    assert w.rec.alerts.check() == 1 and _alerts(w)[-1].startswith("team research reached 50%")


def test_alerts_follow_real_spend_and_the_metrics_count_them(make_world) -> None:
    w = make_world(budgets=[{"name": "all", "limit_usd": 3.0, "window": "total", "hard": False}])
    w.rec.config = w.rec.config.model_copy(update={"alerts": AlertSettings(forecast=False)})
    m = Metrics()
    m.refresh(w.rec.engine, w.rec.catalogs.catalog, w.rec.config, w.clock.now())
    w.submit(gpus="V100:1")
    w.tick_until(lambda: len(_alerts(w)) >= 2, seconds=600)
    first, second = _alerts(w)[:2]
    assert first.startswith("budget 'all' reached 50% of its total limit ($")
    assert second.startswith("budget 'all' reached 80% of its total limit ($")
    m.refresh(w.rec.engine, w.rec.catalogs.catalog, w.rec.config, w.clock.now())
    text = generate_latest(m.registry).decode()
    assert 'spotwise_budget_alerts_total{budget="all",kind="50%"} 1.0' in text
    assert "spotwise_budget_limit_reached_timestamp_seconds{" in text
    assert "spotwise_webhook_pending 0.0" in text


class _Hook(BaseHTTPRequestHandler):
    fail_first = 0
    delay = 0.0
    bodies: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(type(self).delay)
        type(self).bodies.append(body)
        code = 500 if len(type(self).bodies) <= type(self).fail_first else 200
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook():
    handler = type("Hook", (_Hook,), {"bodies": [], "fail_first": 0, "delay": 0.0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/hooks/T000/SECRET"
    server.shutdown()
    server.server_close()


def _with_webhook(w, url: str, **kw) -> None:
    w.rec.config = w.rec.config.model_copy(
        update={"alerts": AlertSettings(webhook_url=url, webhook_timeout="2s", **kw)}
    )


def test_the_webhook_is_retried_until_it_takes_the_alert(make_world, hook, caplog) -> None:
    handler, url = hook
    handler.fail_first = 2
    w = make_world()
    w.clock.now = lambda: DEC13  # type: ignore[method-assign]
    _with_webhook(w, url)
    _publish(w, "research", "team:research", spent=260.0, burn=0.0)
    assert w.rec.alerts.check() == 1
    sender = WebhookSender(w.rec.db, lambda: w.rec.config)
    now = datetime.now(UTC)
    assert sender.deliver_due(now) == 0  # HTTP 500: tried again after a back-off
    assert sender.deliver_due(now) == 0  # not due yet: nothing sent
    assert sender.deliver_due(now + timedelta(seconds=6)) == 0
    assert sender.deliver_due(now + timedelta(seconds=30)) == 1
    assert len(handler.bodies) == 3
    body = handler.bodies[-1]
    assert body["text"].startswith("spotwise: team research reached 50% of its monthly limit")
    assert body["spotwise"]["budget"] == "research" and body["spotwise"]["kind"] == "50%"
    with Session(w.rec.engine) as s:
        (row,) = s.exec(select(WebhookDelivery)).all()
    assert row.tries == 3 and row.delivered_at is not None
    assert "SECRET" not in caplog.text and "HTTP 500" in caplog.text


def test_a_webhook_that_keeps_failing_is_given_up_after_its_retries(make_world, hook, caplog):
    handler, url = hook
    handler.fail_first = 1000
    w = make_world()
    w.clock.now = lambda: DEC13  # type: ignore[method-assign]
    _with_webhook(w, url, webhook_retries=2)
    _publish(w, "research", "team:research", spent=260.0, burn=0.0)
    assert w.rec.alerts.check() == 1
    sender = WebhookSender(w.rec.db, lambda: w.rec.config)
    now = datetime.now(UTC)
    assert sender.deliver_due(now) == 0
    assert sender.deliver_due(now + timedelta(minutes=1)) == 0
    assert sender.deliver_due(now + timedelta(hours=1)) == 0  # given up: not tried again
    assert len(handler.bodies) == 2
    with Session(w.rec.engine) as s:
        (row,) = s.exec(select(WebhookDelivery)).all()
    assert row.tries == 2 and row.gave_up_at is not None and row.delivered_at is None
    assert "gave up on alert" in caplog.text and "SECRET" not in caplog.text


@pytest.mark.slow
def test_a_webhook_that_never_answers_never_holds_up_a_pass(make_world, hook) -> None:
    handler, url = hook
    handler.delay = 3.0
    w = make_world(budgets=[{"name": "all", "limit_usd": 1.0, "window": "total", "hard": False}])
    _with_webhook(w, url, webhook_retries=2)
    sender = WebhookSender(w.rec.db, lambda: w.rec.config)
    sender.start()
    try:
        w.submit(gpus="V100:1")
        started = time.monotonic()
        w.tick_until(lambda: len(_alerts(w)) >= 1, seconds=600)
        assert len(_alerts(w)) >= 1
        assert time.monotonic() - started < 2.5  # the passes never waited on the webhook
        deadline = time.monotonic() + 20
        while not handler.bodies and time.monotonic() < deadline:
            time.sleep(0.1)
        assert handler.bodies  # sent by the sender's own thread
    finally:
        sender.stop()


def test_a_user_budget_covers_what_that_user_submitted(make_world) -> None:
    w = make_world(
        budgets=[
            {"name": "alice", "scope": "user:alice", "limit_usd": 50.0, "window": "total"},
            {"name": "bob", "scope": "user:bob", "limit_usd": 50.0, "window": "total"},
        ]
    )
    spec = jobspec_from_dict({"name": "a", "command": ["train"], "gpus": "V100:1"})
    submit(w.rec.engine, spec, w.clock.now(), (w.tmp / "ck").as_uri(), "alice")
    w.tick(seconds=600, n=6)
    rows = {
        r["name"]: r for r in read_models.budget_rows(w.rec.engine, w.rec.config, w.clock.now())
    }
    assert rows["alice"]["spent_usd"] > 0.5 and rows["alice"]["burn_per_hour"] > 0
    assert rows["bob"]["spent_usd"] == 0 and rows["bob"]["burn_per_hour"] == 0
    assert rows["alice"]["forecast_at"] > w.clock.now()  # a total window has no end to pass


def test_the_limit_is_forecast_in_the_budget_document(make_world) -> None:
    w = make_world(budgets=[{"name": "research", "scope": "team:research", "limit_usd": 500.0}])
    _publish(w, "research", "team:research", spent=212.0, burn=2.1)
    (row,) = read_models.budget_rows(w.rec.engine, w.rec.config, DEC13)
    assert row["forecast_at"] == datetime(2026, 12, 19, 5, 8, 34, 285714, tzinfo=UTC)
    _publish(w, "research", "team:research", spent=212.0, burn=0.1)
    (row,) = read_models.budget_rows(w.rec.engine, w.rec.config, DEC13)
    assert row["forecast_at"] is None  # not within this month at that rate
