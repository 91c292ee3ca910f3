"""What every controller shares: the runtime (database, config, providers, clock, catalog),
short sessions, the crash seam for tests, and the cost arithmetic of attempts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from providers.base import Provider
from scheduler.catalog import Catalog
from scheduler.clock import Clock
from scheduler.config import Config
from scheduler.deadline import DeadlinePlanner
from scheduler.models import Attempt, AttemptState, JobState

EXIT_PREEMPTED = 75  # the trainer's "preempted, resume me" exit code
LIVE = (AttemptState.LAUNCHING, AttemptState.RUNNING, AttemptState.STOPPING)
ACTIVE_JOB_STATES = (
    JobState.PENDING,
    JobState.LAUNCHING,
    JobState.RUNNING,
    JobState.RECOVERING,
    JobState.HELD,
)
# How many offerings one pass tries for a job after capacity errors before waiting a pass.
MAX_LAUNCH_TRIES_PER_PASS = 4


class CrashForTest(RuntimeError):
    """Raised by a test's crash hook to simulate the daemon dying between two steps."""


@dataclass
class CatalogHolder:
    """The newest catalog and which provider sells each pool; swapped whole, never mutated."""

    catalog: Catalog = field(default_factory=Catalog.empty)
    provider_of_pool: dict[str, str] = field(default_factory=dict)


def hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


def safe_message(e: BaseException) -> str:
    """One line for the audit log; providers guarantee no credentials in their messages."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:500]


class ControllerBase:
    """State shared by the controllers; `Reconciler` sets it up once."""

    engine: Engine
    config: Config
    providers: dict[str, Provider]
    clock: Clock
    catalogs: CatalogHolder
    planner: DeadlinePlanner
    placing: bool
    _crash_hook: Callable[[str], None] | None
    _lock: threading.RLock
    _orphans_seen: dict[str, datetime]

    def _session(self) -> Session:
        # Objects stay readable after commit: a pass reads them across short transactions.
        return Session(self.engine, expire_on_commit=False)

    def _step(self, name: str) -> None:
        """A named point between two durable steps, where tests make the daemon 'crash'."""
        if self._crash_hook is not None:
            self._crash_hook(name)

    @property
    def owner(self) -> str:
        return self.config.daemon.owner

    def _hold_hours(self) -> float:
        """Least time a launched attempt is surely paid for: one accrual plus the stop grace."""
        d = self.config.daemon
        return hours(d.accrue_interval + d.stop_grace)

    @staticmethod
    def _attempt_cost(a: Attempt, until: datetime) -> float:
        if a.started_at is None:
            return 0.0
        return round(a.price_per_hour * max(0.0, hours(until - a.started_at)), 6)

    def _job_cost(self, s: Session, job_id: str, now: datetime) -> float:
        total = 0.0
        for a in s.exec(select(Attempt).where(Attempt.job_id == job_id)).all():
            total += a.cost_usd if a.state is AttemptState.ENDED else self._attempt_cost(a, now)
        return round(total, 6)
