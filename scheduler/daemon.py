"""The long-running daemon: APScheduler 3.x drives the reconcile tasks; signals steer it.

APScheduler holds only timers (in-memory store, fixed job ids); all durable state is in our
tables. SIGTERM stops placing, lets in-flight calls finish and exits 0 (jobs keep running: the
daemon is not in their data path). SIGHUP reloads the config, keeping the old one if invalid.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from scheduler import systemd
from scheduler.adapters import build_providers, clock_for
from scheduler.clock import Clock
from scheduler.config import Config, find_config, load_config
from scheduler.db import open_db
from scheduler.errors import UserError
from scheduler.metrics import Metrics
from scheduler.reconcile import Reconciler

log = logging.getLogger("spotwise.daemon")


class Daemon:
    def __init__(self, config_path: str | Path | None = None, clock: Clock | None = None) -> None:
        self.config_path = find_config(config_path)
        self.config: Config = load_config(self.config_path)
        self.clock = clock or clock_for(self.config)
        self.engine = open_db(self.config.daemon.resolved_database_url())
        self.reconciler = Reconciler(
            self.engine, self.config, build_providers(self.config), self.clock
        )
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._scheduler: BackgroundScheduler | None = None
        self.metrics = Metrics()

    # Each task swallows its own errors: APScheduler would log them, but we also want an event
    # and a daemon that keeps ticking.
    def _run_task(self, name: str) -> None:
        try:
            with self.metrics.task_seconds.labels(name).time():
                getattr(self.reconciler, name)()
            if name == "reconcile" and systemd.watchdog_enabled():
                systemd.notify("WATCHDOG=1")
            if name == "accrue":
                self.metrics.refresh(self.engine, len(self.reconciler.catalogs.catalog))
        except Exception:
            self.metrics.task_errors.labels(name).inc()
            log.exception("task %s failed; will run again on its next tick", name)

    def _schedule(self) -> None:
        d = self.config.daemon
        sched = self._scheduler
        # Intervals are in clock time; on the sped-up local market they pass faster.
        speed = getattr(self.clock, "speedup", 1.0)
        assert sched is not None
        for name, every in (
            ("poll_prices", d.price_interval),
            ("reconcile", d.reconcile_interval),
            ("accrue", d.accrue_interval),
        ):
            sched.add_job(
                self._run_task,
                "interval",
                args=[name],
                id=name,
                replace_existing=True,
                seconds=every.total_seconds() / speed,
                coalesce=True,
                max_instances=1,
            )

    def reload(self) -> None:
        try:
            new = load_config(self.config_path)
        except UserError as e:
            log.error("config reload rejected, keeping the running config:\n%s", e)
            return
        self.config = new
        self.reconciler.config = new
        self.reconciler.providers = build_providers(new)
        self._schedule()
        log.info("config reloaded from %s", self.config_path or "defaults")

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        signal.signal(signal.SIGTERM, lambda *_: self._stop.set())
        signal.signal(signal.SIGINT, lambda *_: self._stop.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload.set())
        if self.config.daemon.metrics_port is not None:
            self.metrics.serve(self.config.daemon.metrics_port)
        # The first price poll and pass run before READY, so status is meaningful at once.
        self._run_task("poll_prices")
        self._run_task("reconcile")
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(3)}, timezone="UTC"
        )
        self._schedule()
        self._scheduler.start()
        systemd.notify("READY=1\nSTATUS=reconciling")
        log.info("spotwise daemon running (providers: %s)", ", ".join(self.reconciler.providers))
        while not self._stop.is_set():
            if self._reload.wait(0.2):
                self._reload.clear()
                self.reload()
        systemd.notify("STOPPING=1")
        log.info("stopping: no new placements; waiting for in-flight calls")
        self.reconciler.placing = False
        self._scheduler.shutdown(wait=True)
        log.info("stopped")
        return 0
