"""Budget alerts: a budget crossing a threshold of its limit (50, 80 and 100% by default),
and a forecast that it will reach its limit before its window ends at the current burn.

Each alert is raised once per budget, window and kind: the BudgetAlert row says it was, in
the same transaction as its event (kind `budget_alert`, level warning, so it is in the log
at warning too) and, when a webhook is configured, its outbox row (daemon/webhook.py sends
it from its own thread). A restarted daemon neither repeats nor loses one. What is read is
what the spend controller last published (BudgetSpend): no cloud call, one small read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from sqlmodel import select

from scheduler.core.budget import Window, limit_reached_at, thresholds_crossed, window_end
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.daemon.controllers.base import Db
from scheduler.state.audit import emit
from scheduler.state.models import BudgetAlert, BudgetSpend, WebhookDelivery

WINDOW_WORD = {"day": "daily", "week": "weekly", "month": "monthly", "total": "total"}


def who(scope: str, name: str) -> str:
    """The budget as a sentence names it: 'team research', 'user alice', 'budget company'."""
    kind, _, value = scope.partition(":")
    return f"{kind} {value}" if kind in ("team", "user", "job") else f"budget {name!r}"


def when_words(at: datetime, window: str) -> str:
    """'on the 19th (14:00 UTC)'; within a daily window 'at 14:00 UTC'."""
    at = at.astimezone(UTC)
    if window == Window.DAY.value:
        return f"at {at:%H:%M} UTC"
    day = at.day
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"on the {day}{suffix} ({at:%H:%M} UTC)"


class AlertController:
    def __init__(self, db: Db, clock: Clock, config: Callable[[], Config]) -> None:
        self.db = db
        self.clock = clock
        self._config = config

    def check(self) -> int:
        """Raise the alerts that are due; returns how many were raised."""
        cfg = self._config().alerts
        now = self.clock.now()
        raised = 0
        with self.db.write() as s:
            for b in s.exec(select(BudgetSpend)).all():
                if b.limit_usd <= 0:
                    continue
                key = b.window_start.isoformat() if b.window_start else "total"
                done = set(
                    s.exec(
                        select(BudgetAlert.kind).where(
                            BudgetAlert.budget == b.name, BudgetAlert.window_key == key
                        )
                    ).all()
                )
                for kind, message, at in self._due(b, now, done):
                    s.add(BudgetAlert(budget=b.name, window_key=key, kind=kind, at=now,
                                      message=message))  # fmt: skip
                    emit(s, now, "budget_alert", message, level="warning")
                    if cfg.webhook_url:
                        wall = datetime.now(UTC)
                        body = json.dumps(_payload(b, kind, message, at))
                        s.add(WebhookDelivery(created_at=wall, payload_json=body, next_try_at=wall))
                    raised += 1
        return raised

    def _due(
        self, b: BudgetSpend, now: datetime, done: set[str]
    ) -> list[tuple[str, str, datetime | None]]:
        """(kind, message, when the limit is reached) of each alert `b` is due."""
        cfg = self._config().alerts
        words = WINDOW_WORD.get(b.window, b.window)
        out: list[tuple[str, str, datetime | None]] = []
        for pct in thresholds_crossed(b.spent_usd, b.limit_usd, cfg.thresholds):
            if f"{pct:g}%" not in done:
                message = (
                    f"{who(b.scope, b.name)} reached {pct:g}% of its {words} limit "
                    f"(${b.spent_usd:,.2f} of ${b.limit_usd:,.2f}, budget {b.name!r})"
                )
                out.append((f"{pct:g}%", message, None))
        end = window_end(Window(b.window), now)
        at = limit_reached_at(b.spent_usd, b.burn_per_hour, b.limit_usd, now, end)
        if cfg.forecast and at is not None and at > now and "forecast" not in done:
            message = (
                f"{who(b.scope, b.name)} will reach its {words} limit (${b.limit_usd:,.2f}) "
                f"{when_words(at, b.window)} at this rate (${b.burn_per_hour:,.2f}/h, "
                f"${b.spent_usd:,.2f} spent; budget {b.name!r})"
            )
            out.append(("forecast", message, at))
        return out


def _payload(b: BudgetSpend, kind: str, message: str, at: datetime | None) -> dict[str, object]:
    """A Slack-compatible body (`text`), with the facts for any other receiver beside it."""
    return {
        "text": f"spotwise: {message}",
        "spotwise": {
            "kind": kind,
            "budget": b.name,
            "scope": b.scope,
            "window": b.window,
            "spent_usd": round(b.spent_usd, 2),
            "limit_usd": b.limit_usd,
            "burn_per_hour": round(b.burn_per_hour, 4),
            "limit_reached_at": at.astimezone(UTC).isoformat() if at else None,
        },
    }
