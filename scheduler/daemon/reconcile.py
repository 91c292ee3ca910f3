"""The reconcile loop: composes the controllers, one concern each, into the daemon's passes.

Each pass is level-triggered and idempotent: observe the clouds, stop what must stop,
replace the lost nodes of running gangs, step every job (the next state of a job whose
attempt ended, placement, launch intents), launch the new intents and adopt the old ones,
collect leaks. Every cloud call is preceded by a
committed intent, so a crash between any two steps is repaired by the next pass. Budget
accrual and enforcement run as their own task (`accrue`) and never wait on a cloud call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from sqlalchemy.engine import Engine
from sqlmodel import col, select

from providers.base import Provider
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.deadline import DeadlinePlanner
from scheduler.core.states import AttemptState
from scheduler.daemon.alerts import AlertController
from scheduler.daemon.checkpoints import CheckpointStores
from scheduler.daemon.controllers.base import (
    LAUNCH_ROUNDS,
    CatalogHolder,
    Clouds,
    Db,
    Fence,
    FencedStores,
    Observations,
    hours,
)
from scheduler.daemon.controllers.gang_recovery import GangRecovery
from scheduler.daemon.controllers.instances import InstanceController
from scheduler.daemon.controllers.job.controller import JobController
from scheduler.daemon.controllers.launch.controller import LaunchController
from scheduler.daemon.controllers.leaks import LeakController
from scheduler.daemon.controllers.prices import PriceController
from scheduler.daemon.controllers.spend import SpendController
from scheduler.daemon.controllers.stopping import BudgetStops, StopController
from scheduler.daemon.hooks_for_tests import CrashForTest, Steps
from scheduler.state.installation import install_id
from scheduler.state.models import Attempt

__all__ = ["LAUNCH_ROUNDS", "CatalogHolder", "Reconciler"]

log = logging.getLogger("spotwise.reconcile")


class Reconciler:
    """The passes the daemon runs: `poll_prices`, `reconcile` and `accrue`."""

    def __init__(
        self,
        engine: Engine,
        config: Config,
        providers: Mapping[str, Provider],
        clock: Clock,
        *,
        crash_hook: Callable[[str], None] | None = None,
        stores: CheckpointStores | None = None,
        fence: Fence | None = None,
        observe_only: frozenset[str] = frozenset(),
    ) -> None:
        self.engine = engine
        self.install_id = install_id(engine)  # tags every resource; leaks are only these
        self.fence = fence  # the PostgreSQL lease: every write and cloud call is fenced
        self.db = Db(engine, fence)
        self.clock = clock
        self.catalogs = CatalogHolder()
        self.stores = stores or (FencedStores(fence) if fence else CheckpointStores())
        self.steps = Steps(crash_hook)
        self._config = config
        self._observe_only = observe_only
        self._clouds = Clouds(providers, config.daemon.call_timeout, fence, observe_only)
        self._planner = self._make_planner(config)
        cfg, clouds, planner = (
            (lambda: self._config),
            (lambda: self._clouds),
            (lambda: self._planner),
        )
        # When each provider last described its instances: spend accrues up to there.
        self.observations = Observations()
        self.spend = SpendController(
            self.db,
            clock,
            self.catalogs,
            cfg,
            self.observations,
            on_budget_stop=lambda: self.budget_stops.wake(),
        )
        self.prices = PriceController(self.db, clock, clouds, self.catalogs, self.spend.reprice)
        self.gangs = GangRecovery(
            self.db, clock, clouds, self.stores, self.catalogs, cfg, self.spend
        )
        self.instances = InstanceController(
            self.db,
            clock,
            clouds,
            self.stores,
            cfg,
            self.spend.bill_to_end,
            self.observations,
            self.gangs.on_loss,
        )
        self.jobs = JobController(
            self.db, clock, self.catalogs, self.stores, self.spend, planner, cfg
        )
        self.launches = LaunchController(
            self.db, clock, clouds, self.stores, self.catalogs, cfg, self.steps, self.install_id
        )
        self.stops = StopController(self.db, clock, clouds, cfg, self.launches.in_flight)
        # Budget stops on their own thread (the daemon runs it), woken by enforcement.
        self.budget_stops = BudgetStops(self.stops)
        self.leaks = LeakController(
            self.db, clock, clouds, cfg, self.install_id, self.spend.bill_leaked
        )
        self.alerts = AlertController(self.db, clock, cfg)

    @staticmethod
    def _make_planner(config: Config) -> DeadlinePlanner:
        return DeadlinePlanner(
            config.policy.deadline_policy,
            hours(config.policy.restart_overhead),
            hours(config.daemon.reconcile_interval),
        )

    # -- configuration -----------------------------------------------------------------------
    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """A reloaded config: a new deadline planner only when the policy settings changed."""
        old = self._config
        self._config = config
        if (
            old.policy != config.policy
            or old.daemon.reconcile_interval != config.daemon.reconcile_interval
        ):
            self._planner = self._make_planner(config)

    @property
    def providers(self) -> dict[str, Provider]:
        return self._clouds.providers

    @providers.setter
    def providers(self, providers: Mapping[str, Provider]) -> None:
        old = self._clouds
        self._clouds = Clouds(
            providers, self._config.daemon.call_timeout, self.fence, self._observe_only
        )
        old.shutdown()

    @property
    def observe_only(self) -> frozenset[str]:
        """Providers that place nothing new (`enabled = false`), still watched."""
        return self._observe_only

    @observe_only.setter
    def observe_only(self, names: frozenset[str]) -> None:
        self._observe_only = names
        self._clouds.observe_only = names

    @property
    def planner(self) -> DeadlinePlanner:
        return self._planner

    @property
    def placing(self) -> bool:
        return self.jobs.placing

    @placing.setter
    def placing(self, value: bool) -> None:
        self.jobs.placing = value

    # -- the passes --------------------------------------------------------------------------
    def poll_prices(self) -> None:
        self.prices.poll()

    def accrue(self) -> None:
        self.spend.accrue()
        self._guarded("alerts", self._alert)  # from what the accrual just published

    def _alert(self) -> None:
        self.alerts.check()

    def reconcile(self) -> None:
        """One level-triggered pass."""
        # Budgets are checked first in every pass too (database work only): a delayed accrue
        # task never leaves a hard limit unguarded for longer than one reconcile interval.
        self._guarded("accrue", self.spend.accrue)
        self._guarded("stop", self.stops.step)
        self._guarded("observe", self.instances.observe)
        self._guarded("gangs", self.gangs.step)  # replace lost nodes of running gangs
        intents: list[str] = []

        def step_jobs() -> None:
            intents.extend(self.jobs.step())

        self._guarded("jobs", step_jobs)
        if intents:
            self.steps("after_intent")
        self._guarded("handover", self.launches.hand_over)  # deferred claims now due
        self._guarded("launch", lambda: self._launch(intents))
        self._guarded("stop", self.stops.step)  # a stop requested this pass goes out now
        self._guarded("leaks", self.leaks.collect)

    def _guarded(self, name: str, fn: Callable[[], None]) -> None:
        """One failing step (a database error, an adapter bug) never skips the others: the
        budget stops in particular must go out even when observing the clouds fails."""
        try:
            fn()
        except CrashForTest:
            raise
        except Exception:
            log.exception("reconcile step %s failed; the pass goes on", name)

    def _launch(self, intents: list[str]) -> None:
        """Launch new intents, adopt or relaunch old ones; jobs whose pool had no capacity get
        their next offering in the same pass."""
        with self.db.read() as s:
            waiting = s.exec(
                select(Attempt.id, Attempt.launch_requested_at).where(
                    Attempt.state == AttemptState.LAUNCHING,
                    col(Attempt.instance_id).is_(None),
                    col(Attempt.stop_requested_at).is_(None),
                )
            ).all()
        fresh = [i for i, asked in waiting if asked is None]
        # A call still on the wire is neither adopted nor sent again: it lands, or fails.
        stale = [i for i, asked in waiting if asked is not None and not self.launches.in_flight(i)]
        relaunch = self.launches.adopt(stale) if stale else []
        todo = list(dict.fromkeys(fresh + relaunch))
        for _ in range(LAUNCH_ROUNDS):
            if not todo:
                return
            outcomes = self.launches.launch(todo)
            retry_jobs = [o.attempt_id.rsplit("-a", 1)[0] for o in outcomes if o.pool_failed]
            if not retry_jobs:
                return
            todo = self.jobs.step(only=retry_jobs)
