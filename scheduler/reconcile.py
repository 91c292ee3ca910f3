"""The reconcile loop: level-triggered, idempotent steps that move every job toward its goal.

Each pass reads desired state (jobs) and observed state (instances) and steps each job forward.
Every cloud call is preceded by a committed intent (an Attempt row carrying a deterministic
idempotency token), so a crash between any two steps is repaired by the next pass: a LAUNCHING
attempt is adopted by its token or launched again *with the same token*, which the provider
turns into a no-op. Nothing here raises out of a pass because of one job or one API call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime

from sqlalchemy.engine import Engine

from providers.base import Provider
from scheduler.clock import Clock
from scheduler.config import Config
from scheduler.controllers.base import (
    CatalogHolder,
    CrashForTest,
    hours,
)
from scheduler.controllers.instances import InstanceController
from scheduler.controllers.jobs import JobController
from scheduler.controllers.leaks import LeakController
from scheduler.controllers.prices import PriceController
from scheduler.controllers.spend import SpendController
from scheduler.controllers.stopping import StopController
from scheduler.deadline import DeadlinePlanner

__all__ = ["CatalogHolder", "CrashForTest", "Reconciler"]


class Reconciler(
    PriceController,
    InstanceController,
    JobController,
    StopController,
    LeakController,
    SpendController,
):
    """The passes the daemon runs: `poll_prices`, `reconcile` and `accrue`."""

    def __init__(
        self,
        engine: Engine,
        config: Config,
        providers: Mapping[str, Provider],
        clock: Clock,
        *,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.providers = dict(providers)
        self.clock = clock
        self.catalogs = CatalogHolder()
        self.placing = True  # cleared on SIGTERM: finish in-flight work, start nothing new
        self._crash_hook = crash_hook
        self._lock = threading.RLock()  # reconcile and accrue mutate the same rows
        self._orphans_seen: dict[str, datetime] = {}
        self.config = config

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """A reloaded config also re-creates the deadline planner (its policy may change)."""
        self._config = config
        self.planner = DeadlinePlanner(
            config.policy.deadline_policy,
            hours(config.policy.restart_overhead),
            hours(config.daemon.reconcile_interval),
        )

    def reconcile(self) -> None:
        """One level-triggered pass: observe instances, step every job, collect leaks."""
        with self._lock:
            self._observe_attempts()
            self._step_jobs()
            self._collect_leaks()
