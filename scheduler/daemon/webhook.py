"""Sends queued alerts to the configured webhook (Slack-compatible: a JSON body with `text`),
from its own thread, with retries: the daemon's passes never wait on it.

The queue is the WebhookDelivery table (daemon/alerts.py adds to it with the alert), so a
delivery survives a restart; each try is at most `webhook_timeout`, a failure is tried again
after a back-off that doubles (5 s, 10 s, ... up to 10 minutes), and after `webhook_retries`
tries the delivery is given up with an error in the log. Delivery is at least once: a
restart between a send and its record sends that alert again. The webhook's URL holds its
secret (Slack's does), so it is never logged: failures name the status or the error only.
Retry times are wall-clock time (a sped-up local market does not hurry the network).
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlmodel import col, select

from providers.masking import mask
from scheduler.core.config import Config
from scheduler.daemon.controllers.base import Db
from scheduler.state.models import WebhookDelivery

log = logging.getLogger("spotwise.webhook")

BATCH = 20
BACKOFF_FIRST = timedelta(seconds=5)
BACKOFF_MAX = timedelta(minutes=10)
IDLE_SECONDS = 2.0


def backoff(tries: int) -> timedelta:
    return min(BACKOFF_FIRST * (2 ** max(tries - 1, 0)), BACKOFF_MAX)


def post(url: str, body: bytes, timeout: float) -> str | None:
    """POST `body` as JSON; None when the webhook took it (2xx), else why not (no URL)."""
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read(1024)
            return None
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code} {e.reason}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return mask(f"{type(reason).__name__}: {reason}".replace(url, "<webhook>"))


class WebhookSender:
    def __init__(self, db: Db, config: Callable[[], Config]) -> None:
        self.db = db
        self._config = config
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def deliver_due(self, now: datetime | None = None) -> int:
        """One round: try every delivery that is due; returns how many were delivered."""
        cfg = self._config().alerts
        if not cfg.webhook_url:
            return 0
        now = now or datetime.now(UTC)
        with self.db.read() as s:
            due = s.exec(
                select(WebhookDelivery)
                .where(
                    col(WebhookDelivery.delivered_at).is_(None),
                    col(WebhookDelivery.gave_up_at).is_(None),
                    WebhookDelivery.next_try_at <= now,
                )
                .order_by(col(WebhookDelivery.id))
                .limit(BATCH)
            ).all()
        sent = 0
        for d in due:  # each outside any transaction: a slow webhook holds no lock
            if self._stop.is_set():
                break
            error = post(
                cfg.webhook_url, d.payload_json.encode(), cfg.webhook_timeout.total_seconds()
            )
            with self.db.write() as s:
                row = s.get(WebhookDelivery, d.id)
                if row is None:
                    continue
                row.tries += 1
                at = datetime.now(UTC)
                if error is None:
                    row.delivered_at, row.last_error = at, ""
                    sent += 1
                elif row.tries >= cfg.webhook_retries:
                    row.gave_up_at, row.last_error = at, error
                    log.error(
                        "webhook: gave up on alert %s after %d tries: %s", row.id, row.tries, error
                    )
                else:
                    row.next_try_at, row.last_error = at + backoff(row.tries), error
                    log.warning("webhook: alert %s not delivered (try %d): %s; trying again",
                                row.id, row.tries, error)  # fmt: skip
                s.add(row)
        return sent

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.deliver_due()
            except Exception:  # the sender never dies: a database hiccup, the next round
                log.exception("webhook: a delivery round failed; trying again")
            self._stop.wait(IDLE_SECONDS)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="spotwise-webhook", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
