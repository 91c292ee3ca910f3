"""Prometheus metrics for the daemon (served on [daemon] metrics_port, loopback by default).

Named and shaped as Prometheus users expect: counters end in `_total` and exist at 0 for
every label set known up front (each task, each launch-failure reason, each cloud and region
the catalog lists, each team), so `rate()` and `increase()` alerts read 0 rather than
nothing before the first event; durations are `_duration_seconds`; the process collector
(CPU, memory, file descriptors) and `spotwise_build_info` are there.

What is read from the database at each accrual is an aggregate over what is active (jobs by
state, live attempts' burn, the oldest waiting job) or an increment since the last read
(new events by id, spend buckets of the last hours), never a scan of the whole history:
an idle daemon's cost does not grow with finished jobs. Counters count from the daemon's
start (Prometheus handles the reset at a restart), except spend, which starts from the
ledger's total so a dashboard shows what was ever paid.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from scheduler.core.budget import Window, limit_reached_at, window_end
from scheduler.core.catalog import Catalog
from scheduler.core.config import Config
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state.models import BudgetSpend

TASKS = ("poll_prices", "reconcile", "accrue", "maintain")
LAUNCH_FAILURES = (AttemptEnd.LAUNCH_FAILED, AttemptEnd.REJECTED, AttemptEnd.LOST)
_FAILURE_KINDS = {f"attempt_{e.value}": e.value for e in LAUNCH_FAILURES}
_INTERRUPTED = f"attempt_{AttemptEnd.INTERRUPTED.value}"
# Spend buckets this recent are re-read at each refresh (an hour's bucket grows while its
# hour runs, and a late accrual may still add to the one before).
RECENT_BUCKETS = timedelta(hours=3)


class _Spend(Collector):
    """spotwise_spend_usd_total{team,cloud}: what was paid, from the spend ledger."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], float] = {}

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "spotwise_spend_usd",
            "USD paid, at the prices actually paid (the ledger budgets sum)",
            labels=["team", "cloud"],
        )
        for (team, cloud), usd in sorted(self.totals.items()):
            family.add_metric([team, cloud], usd)
        yield family


class Metrics:
    def __init__(self, version: str = "unknown", schema: str = "") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        Gauge(
            "spotwise_build_info",
            "The running spotwise: version, Python and database schema (value 1)",
            ["version", "python", "schema"],
            registry=r,
        ).labels(version, platform.python_version(), schema).set(1)
        self.jobs = Gauge("spotwise_jobs", "Jobs by state", ["state"], registry=r)
        for st in JobState:
            self.jobs.labels(st.value)
        budget_labels = ["budget", "scope", "window", "hard"]
        self.spent = Gauge(
            "spotwise_budget_spent_usd", "Spend in the budget's window", budget_labels, registry=r
        )
        self.limit = Gauge(
            "spotwise_budget_limit_usd", "The budget's limit", budget_labels, registry=r
        )
        self.projected = Gauge(
            "spotwise_budget_projected_usd",
            "Spend at the window's end if the current burn goes on (total windows: spent)",
            budget_labels,
            registry=r,
        )
        self.limit_reached = Gauge(
            "spotwise_budget_limit_reached_timestamp_seconds",
            "When the budget reaches its limit at the current burn, if within its window "
            "(Unix time; 0: not in this window)",
            budget_labels,
            registry=r,
        )
        self.alerts = Counter(
            "spotwise_budget_alerts",
            "Budget alerts raised: a threshold of the limit crossed, or the limit forecast",
            ["budget", "kind"],
            registry=r,
        )
        self.webhook_pending = Gauge(
            "spotwise_webhook_pending",
            "Alerts waiting to be delivered to the webhook (0 when none is configured)",
            registry=r,
        )
        self._last_alert: int | None = None
        self.offerings = Gauge(
            "spotwise_offerings",
            "Offerings in the catalog",
            ["provider", "cloud", "market"],
            registry=r,
        )
        self.task_seconds = Histogram(
            "spotwise_task_duration_seconds",
            "Duration of the daemon's periodic tasks",
            ["task"],
            registry=r,
        )
        self.task_errors = Counter(
            "spotwise_task_errors", "Daemon task runs that raised", ["task"], registry=r
        )
        for task in TASKS:
            self.task_seconds.labels(task)
            self.task_errors.labels(task)
        self.last_pass = Gauge(
            "spotwise_last_pass_timestamp_seconds",
            "Unix time the last reconcile pass finished",
            registry=r,
        )
        self.burn = Gauge(
            "spotwise_burn_usd_per_hour",
            "What the running attempts cost per hour (a gang's every node)",
            ["team", "cloud"],
            registry=r,
        )
        self.oldest_pending = Gauge(
            "spotwise_oldest_pending_age_seconds",
            "How long the oldest waiting job (PENDING or RECOVERING) has waited; 0: none",
            registry=r,
        )
        self.interruptions = Counter(
            "spotwise_interruptions",
            "Attempts the cloud took back",
            ["cloud", "region"],
            registry=r,
        )
        self.launch_failures = Counter(
            "spotwise_launch_failures",
            "Attempts that never ran: no capacity or quota, rejected, or lost",
            ["reason"],
            registry=r,
        )
        for end in LAUNCH_FAILURES:
            self.launch_failures.labels(end.value)
        self._spend = _Spend()
        r.register(self._spend)
        self._last_event: int | None = None  # events above this id are not counted yet
        self._buckets: dict[int, float] = {}  # recent spend buckets as last read
        self._spend_read = False  # the ledger's total is read once, then what is new
        self._offering_keys: set[tuple[str, str, str]] = set()

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def passed(self) -> None:
        """A reconcile pass finished now."""
        self.last_pass.set(time.time())

    def refresh(
        self,
        engine: Engine,
        catalog: Catalog,
        config: Config,
        now: datetime,
        provider_of_pool: Mapping[str, str] | None = None,
    ) -> None:
        """Read what changed since the last refresh (at each accrual)."""
        self._offerings(catalog, provider_of_pool or {})
        teams = [*config.daemon.teams, "default"]
        clouds = sorted(set(catalog.clouds.values))
        for team in teams:
            for cloud in clouds:
                self._spend.totals.setdefault((team, cloud), 0.0)
        for cloud, region in _regions(catalog):
            self.interruptions.labels(cloud, region)
        with engine.connect() as c:
            self._jobs(c, now)
            self._budgets(c, now)
            self._alerts(c)
            self._burn(c)
            self._events(c)
            self._spend_since(c, now)

    def _offerings(self, catalog: Catalog, provider_of: Mapping[str, str]) -> None:
        counts: dict[tuple[str, str, str], int] = {}
        if len(catalog):
            names = np.asarray(catalog.clouds.values, dtype=object)[catalog.cloud]
            pools = np.asarray(catalog.pools.values, dtype=object)[catalog.pool]
            for cloud, pool, spot in zip(names, pools, catalog.spot, strict=True):
                key = (provider_of.get(pool, cloud), cloud, "spot" if spot else "on-demand")
                counts[key] = counts.get(key, 0) + 1
        # Set in place, never cleared: a scrape between a clear and the sets would read none.
        for key in self._offering_keys - counts.keys():
            self.offerings.labels(*key).set(0)
        for (provider, cloud, market), n in counts.items():
            self.offerings.labels(provider, cloud, market).set(n)
        self._offering_keys |= counts.keys()

    def _jobs(self, c: sa.Connection, now: datetime) -> None:
        # An aggregate: the idle daemon's cost must not grow with finished jobs.
        states: dict[str, int] = {
            str(k): int(n)
            for k, n in c.execute(sa.text("SELECT state, count(*) FROM job GROUP BY state")).all()
        }
        for st in JobState:
            self.jobs.labels(st.value).set(states.get(st.value, 0))
        waiting = [JobState.PENDING.value, JobState.RECOVERING.value]
        oldest = c.execute(
            sa.text("SELECT min(created_at) FROM job WHERE state IN :states").bindparams(
                sa.bindparam("states", expanding=True)
            ),
            {"states": waiting},
        ).scalar()
        age = (now - _aware(oldest)).total_seconds() if oldest is not None else 0.0
        self.oldest_pending.set(max(0.0, age))

    def _budgets(self, c: sa.Connection, now: datetime) -> None:
        b = BudgetSpend.__table__.c  # type: ignore[attr-defined]
        rows = c.execute(
            sa.select(b.name, b.scope, b.window, b.hard, b.limit_usd, b.spent_usd, b.burn_per_hour)
        ).all()
        for name, scope, window, hard, limit, spent, burn in rows:
            labels = (name, scope, window, "true" if hard else "false")
            self.spent.labels(*labels).set(spent)
            self.limit.labels(*labels).set(limit)
            end = window_end(Window(window), now)
            left = max(0.0, (end - now).total_seconds() / 3600.0) if end else 0.0
            self.projected.labels(*labels).set(spent + burn * left)
            at = limit_reached_at(spent, burn, limit, now, end)
            self.limit_reached.labels(*labels).set(at.timestamp() if at else 0.0)

    def _alerts(self, c: sa.Connection) -> None:
        """Alerts raised since the last refresh (by id), and the webhook's queue."""
        last = self._last_alert
        rows = c.execute(
            sa.text("SELECT id, budget, kind FROM budgetalert WHERE id > :last ORDER BY id"),
            {"last": last or 0},
        ).all()
        for i, budget, kind in rows:
            if last is not None:  # alerts from before this daemon started are not counted
                self.alerts.labels(budget, kind).inc()
            self._last_alert = max(self._last_alert or 0, int(i))
        if self._last_alert is None:
            self._last_alert = 0
        pending = c.execute(
            sa.text(
                "SELECT count(*) FROM webhookdelivery "
                "WHERE delivered_at IS NULL AND gave_up_at IS NULL"
            )
        ).scalar()
        self.webhook_pending.set(float(pending or 0))

    def _burn(self, c: sa.Connection) -> None:
        live = [
            AttemptState.LAUNCHING.value,
            AttemptState.RUNNING.value,
            AttemptState.STOPPING.value,
        ]
        rows = c.execute(
            sa.text(
                "SELECT job.team, attempt.cloud, "
                "sum(coalesce(attempt.billed_price, attempt.price_per_hour) * attempt.nodes) "
                "FROM attempt JOIN job ON job.id = attempt.job_id "
                "WHERE attempt.state IN :live AND attempt.started_at IS NOT NULL "
                "GROUP BY job.team, attempt.cloud"
            ).bindparams(sa.bindparam("live", expanding=True)),
            {"live": live},
        ).all()
        seen = set()
        for team, cloud, usd in rows:
            self.burn.labels(team, cloud).set(float(usd or 0.0))
            seen.add((team, cloud))
        for team, cloud in self._spend.totals:
            if (team, cloud) not in seen:
                self.burn.labels(team, cloud).set(0.0)

    def _events(self, c: sa.Connection) -> None:
        """Interruptions and launch failures recorded since the last refresh (by event id,
        the primary key: a read of what is new, whatever the history)."""
        if self._last_event is None:
            self._last_event = int(c.execute(sa.text("SELECT max(id) FROM event")).scalar() or 0)
            return
        kinds = [_INTERRUPTED, *_FAILURE_KINDS]
        rows = c.execute(
            sa.text(
                "SELECT event.id, event.kind, attempt.cloud, attempt.region FROM event "
                "LEFT JOIN attempt ON attempt.id = event.attempt_id "
                "WHERE event.id > :last AND event.kind IN :kinds ORDER BY event.id"
            ).bindparams(sa.bindparam("kinds", expanding=True)),
            {"last": self._last_event, "kinds": kinds},
        ).all()
        newest = c.execute(sa.text("SELECT max(id) FROM event")).scalar()
        for _id, kind, cloud, region in rows:
            if kind == _INTERRUPTED:
                self.interruptions.labels(cloud or "", region or "").inc()
            else:
                self.launch_failures.labels(_FAILURE_KINDS[kind]).inc()
        self._last_event = max(self._last_event, int(newest or 0))

    def _spend_since(self, c: sa.Connection, now: datetime) -> None:
        """The ledger's total by team and cloud at the first refresh, then what the recent
        buckets added since (a bucket only grows; a refund, which would shrink one, is
        left out: a counter never goes down)."""
        since = now - RECENT_BUCKETS
        recent = c.execute(
            sa.text("SELECT id, team, cloud, usd FROM spendbucket WHERE hour >= :since"),
            {"since": since.replace(tzinfo=None)},
        ).all()
        if not self._spend_read:
            self._spend_read = True
            for team, cloud, usd in c.execute(
                sa.text("SELECT team, cloud, sum(usd) FROM spendbucket GROUP BY team, cloud")
            ).all():
                self._spend.totals[(team, cloud)] = float(usd or 0.0)
            self._buckets = {i: float(usd) for i, _t, _c, usd in recent}
            return
        current = {}
        for i, team, cloud, usd in recent:
            grew = float(usd) - self._buckets.get(i, 0.0)
            if grew > 0:
                key = (team, cloud)
                self._spend.totals[key] = self._spend.totals.get(key, 0.0) + grew
            current[i] = max(float(usd), self._buckets.get(i, 0.0))
        self._buckets = current


def _regions(catalog: Catalog) -> set[tuple[str, str]]:
    if not len(catalog):
        return set()
    clouds = np.asarray(catalog.clouds.values, dtype=object)[catalog.cloud]
    regions = np.asarray(catalog.regions.values, dtype=object)[catalog.region]
    return set(zip(clouds.tolist(), regions.tolist(), strict=True))


def _aware(value: Any) -> datetime:
    from datetime import UTC

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
