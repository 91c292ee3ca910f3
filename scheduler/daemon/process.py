"""The long-running daemon: APScheduler 3.x drives the passes; signals steer it.

APScheduler holds only timers (in-memory store, fixed job ids); all durable state is in our
tables. Start-up order matters: signal handlers first (a SIGHUP during start-up must not kill
it), then ownership (one daemon mutates a database), then the first accrual and budget
enforcement (a crash loop must not overrun a hard budget), then the first price poll and
pass, then READY.

Ownership: on SQLite the state-directory lock and the heartbeat row. On PostgreSQL the lease
(scheduler/state/lease.py): a replica that does not hold it is a standby (READY, STATUS
"standby", no writes, no cloud calls) until the lease expires; a holder that loses it (taken
over after a pause, or not renewed within lease_deadline) stops at once and exits
EXIT_LEASE_LOST, so systemd (Restart=on-failure) starts it again as a standby with nothing of
its old term left in memory.

SIGTERM stops placing, lets in-flight calls finish and exits 0 (jobs keep running: the daemon
is not in their data path). SIGHUP reloads the config; keys that need a restart are refused
with a message, and an invalid file keeps the running config.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

import scheduler
from scheduler.core.clock import Clock, ForwardClock
from scheduler.core.config import Config, DaemonSettings
from scheduler.core.errors import UserError
from scheduler.core.states import AttemptState, JobState
from scheduler.daemon import systemd
from scheduler.daemon.controllers.base import pass_bound as controllers_pass_bound
from scheduler.daemon.metrics import Metrics
from scheduler.daemon.reconcile import Reconciler
from scheduler.daemon.webhook import WebhookSender
from scheduler.daemon.wiring import build_providers, clock_for, observe_only
from scheduler.state.db import is_postgres, open_db, sqlite_path
from scheduler.state.files import find_config, load_config_source
from scheduler.state.installation import check_clock
from scheduler.state.lease import DaemonRecord, Heartbeat, Lease, LeaseTimings, StateLock
from scheduler.state.models import Attempt, Job
from scheduler.state.running_config import changes, record, summary
from scheduler.state.stored_specs import invalid_specs

log = logging.getLogger("spotwise.daemon")

EXIT_LEASE_LOST = 75  # EX_TEMPFAIL: not the user's fault; systemd restarts it as a standby
# EX_IOERR: the database file was deleted or replaced under the daemon; systemd restarts it
# (Restart=on-failure), and the new process opens whatever file is at the path now.
EXIT_DATABASE_GONE = 74
# How often the loop checks that the SQLite file it writes is still the one at its path.
DATABASE_CHECK_SECONDS = 1.0

# Real-time floors: a sped-up market must not make the daemon spin (83 ms passes at 60x).
MIN_REAL_SECONDS = {"poll_prices": 1.0, "reconcile": 0.25, "accrue": 0.25, "maintain": 60.0}
# Keys a running daemon cannot take on reload (they move its state, identity or clock).
RESTART_ONLY = (
    ("daemon", "state_dir"),
    ("daemon", "database_url"),
    ("daemon", "owner"),
    ("daemon", "metrics_port"),
    ("daemon", "checkpoint_root"),
    ("daemon", "lease_ttl"),
    ("daemon", "lease_renew"),
    ("daemon", "lease_deadline"),
    ("daemon", "lease_statement_timeout"),
)


LOCAL_CLOCK_KEYS = ("speedup", "trace", "trace_start")
CLOUD_SECTIONS = ("aws", "gcp", "azure")


def pass_bound(d: DaemonSettings) -> float:
    """The longest a pass can take (real seconds) with every cloud at its deadline."""
    return controllers_pass_bound(d.call_timeout)


def restart_only_changes(old: Config, new: Config) -> list[str]:
    out = [
        f"{sec}.{key}"
        for sec, key in RESTART_ONLY
        if getattr(getattr(old, sec), key) != getattr(getattr(new, sec), key)
    ]
    if old.daemon.resolved_state_dir() != new.daemon.resolved_state_dir():
        out.append("daemon.state_dir")
    ol, nl = old.providers.local, new.providers.local
    if (ol is None) != (nl is None) or (ol and nl and ol.state_dir != nl.state_dir):
        out.append("providers.local")
    if ol is not None and nl is not None:
        # The market's clock: a new speed or trace position would bill running attempts
        # for market hours that never passed (or never bill those that did).
        out.extend(
            f"providers.local.{key}"
            for key in LOCAL_CLOCK_KEYS
            if getattr(ol, key) != getattr(nl, key)
        )
    if ol is not None or nl is not None:
        # Beside the local market a cloud switches the daemon between market time and real
        # time (scheduler.daemon.wiring.clock_for): a cloud added or removed moves its clock.
        out.extend(
            f"providers.{name}"
            for name in CLOUD_SECTIONS
            if (getattr(old.providers, name) is None) != (getattr(new.providers, name) is None)
        )
    return sorted(set(out))


class Daemon:
    def __init__(self, config_path: str | Path | None = None, clock: Clock | None = None) -> None:
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._install_handlers()
        self.config_path = find_config(config_path)
        # The digest of the text validated: the record beside the heartbeat carries it.
        self.config, self.config_digest = load_config_source(self.config_path)
        self._fixed_clock = clock
        self.clock = clock or clock_for(self.config)
        d = self.config.daemon
        url = d.resolved_database_url()
        self._lost = threading.Event()
        self._db_file: Path | None = None
        self._db_identity: tuple[int, int] | None = None
        self.lock: StateLock | None = None
        self.record: DaemonRecord | None = None
        self.lease: Lease | None = None
        if is_postgres(url):
            # Replicas: the lease decides who mutates. A write session this daemon leaves open
            # (paused, wedged) ends by the server's idle timeout, or is ended by the standby
            # that takes the expired lease: it finds the session by the lease's name.
            timings = LeaseTimings.of(d)
            self.lease = Lease(url, timings, _version(), on_lost=self._lease_lost)
            ms = int(timings.deadline * 1000)
            self.engine = open_db(
                url,
                {"idle_in_transaction_session_timeout": ms},
                application_name=self.lease.session_name,
            )
            self._clock_forward()
        else:
            self.lock = StateLock(d.resolved_state_dir())
            self.lock.acquire()
            try:
                self.engine = open_db(url)
                self._clock_forward()
            except BaseException:
                self.lock.release()
                raise
            self._db_file = sqlite_path(url)
            self._db_identity = _file_identity(self._db_file)
            stale = max(timedelta(seconds=60), d.reconcile_interval * 6 / self._speed())
            self.record = DaemonRecord(self.engine, stale)
            self.record.claim(_version(), record(self.config, self.config_path, self.config_digest))
        self.reconciler = Reconciler(
            self.engine,
            self.config,
            build_providers(self.config, include_disabled=True),
            self.clock,
            fence=self.lease,
            observe_only=observe_only(self.config),
        )
        for name, ids in live_on_missing(self.engine, self.reconciler.providers).items():
            log.error(
                "%d attempt(s) run on provider %s, which this config does not have (%s): "
                "nothing watches, stops or bills them; add its section back (enabled = false "
                "places nothing new there) and restart",
                len(ids),
                name,
                ", ".join(ids[:5]),
            )
        for bad in invalid_specs(self.engine):
            log.warning("stored spec no longer validates: %s", bad.line())
        self._scheduler: BackgroundScheduler | None = None
        self.metrics = Metrics(_version(), _schema())
        self._last_pass = time.monotonic()
        self._pass_started: float | None = None  # the pass now running, if one is

    def _clock_forward(self) -> None:
        """Time only moves forward: refuse to start (UserError, one line) when the clock is
        far behind the latest reading the database recorded, and never read earlier than
        it (or than any earlier reading of this process) after that."""
        floor = check_clock(self.engine, self.clock.now(), self._speed())
        self.clock = ForwardClock(self.clock, floor)

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, lambda *_: self._stop.set())
        signal.signal(signal.SIGINT, lambda *_: self._stop.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload.set())
        if scheduler.take_early_reloads():
            log.info("a reload asked for during start-up runs once the daemon is ready")
            self._reload.set()

    def _database_gone(self) -> str | None:
        """Why the SQLite file at the configured path is no longer the one this daemon
        writes (deleted, or replaced by another file); None while it is."""
        if self._db_file is None or self._db_identity is None:
            return None
        now = _file_identity(self._db_file)
        if now is None:
            return f"the database file {self._db_file} was deleted"
        if now != self._db_identity:
            return f"the database file {self._db_file} was replaced by another file"
        return None

    def _speed(self) -> float:
        return float(getattr(self.clock, "speedup", 1.0) or 1.0)

    # Each task swallows its own errors: the daemon keeps ticking, and says so.
    def _run_task(self, name: str) -> None:
        if name == "reconcile":
            self._pass_started = time.monotonic()
        try:
            with self.metrics.task_seconds.labels(name).time():
                if name == "maintain":
                    self._maintain()
                else:
                    getattr(self.reconciler, name)()
            if name == "reconcile":
                self._last_pass = time.monotonic()
                self._pass_started = None
                self.metrics.passed()
                self._beat()
            if name == "accrue":
                holder = self.reconciler.catalogs
                self.metrics.refresh(
                    self.engine,
                    holder.catalog,
                    self.config,
                    self.clock.now(),
                    holder.provider_of_pool,
                )
        except Exception:
            self.metrics.task_errors.labels(name).inc()
            log.exception("task %s failed; will run again on its next tick", name)

    def _alive(self, now: float, watchdog: float) -> bool:
        if now - self._last_pass < watchdog:
            return True
        started = self._pass_started
        return started is not None and now - started < pass_bound(self.config.daemon)

    def _beat(self) -> None:
        status = self._status()
        if self.lease is not None:
            self.lease.beat(status)
        elif self.record is not None:
            self.record.beat(status)
        systemd.notify(f"STATUS={status}")

    def _lease_lost(self, why: str) -> None:
        """Called from whichever thread noticed (cheap, never blocks): stop everything."""
        self.reconciler.placing = False
        self._lost.set()
        self._stop.set()

    def _standby(self) -> bool:
        """Wait for the lease as a standby; False when asked to stop first."""
        assert self.lease is not None
        watchdog = systemd.watchdog_seconds()

        def waiting(hb: Heartbeat | None) -> None:
            who = f"pid {hb.pid} on {hb.host}" if hb is not None else "nobody reachable"
            systemd.notify(f"STATUS=standby: the lease is held by {who}")
            if watchdog:
                systemd.notify("WATCHDOG=1")

        systemd.notify("READY=1")  # a standby is a healthy state of the service
        return self.lease.wait_acquire(self._stop, waiting)

    def _status(self) -> str:
        with Session(self.engine) as s:
            counts = dict(
                s.exec(
                    select(Job.state, func.count())
                    .where(
                        col(Job.state).in_(
                            (
                                JobState.RUNNING,
                                JobState.PENDING,
                                JobState.RECOVERING,
                                JobState.LAUNCHING,
                                JobState.HELD,
                            )
                        )
                    )
                    .group_by(Job.state)
                ).all()
            )
            burn = s.exec(
                select(
                    func.coalesce(
                        func.sum(func.coalesce(Attempt.billed_price, Attempt.price_per_hour)), 0.0
                    )
                ).where(col(Attempt.state).in_((AttemptState.RUNNING, AttemptState.STOPPING)))
            ).one()
        running = counts.get(JobState.RUNNING, 0) + counts.get(JobState.LAUNCHING, 0)
        pending = counts.get(JobState.PENDING, 0) + counts.get(JobState.RECOVERING, 0)
        held = counts.get(JobState.HELD, 0)
        text = f"{running} running, {pending} pending"
        if held:
            text += f", {held} held"
        return text + f", ${float(burn):.2f}/h"

    def _maintain(self) -> None:
        """Retention: prune history the daemon no longer needs (events, prices, instances)."""
        from scheduler.state.retention import prune

        if self.lease is not None:
            self.lease.guard()  # prune writes outside Db: only a valid holder prunes
        prune(self.engine, self.clock.now(), self.config.daemon, self.reconciler.providers)

    def _schedule(self) -> None:
        d = self.config.daemon
        sched = self._scheduler
        if sched is None:  # not running yet: run() schedules with the config it has then
            return
        # Intervals are in clock time; on the sped-up local market they pass faster, but
        # never faster than their real-time floor.
        speed = self._speed()
        for name, every in (
            ("poll_prices", d.price_interval),
            ("reconcile", d.reconcile_interval),
            ("accrue", d.accrue_interval),
            ("maintain", timedelta(hours=1)),
        ):
            seconds = max(every.total_seconds() / speed, MIN_REAL_SECONDS[name])
            sched.add_job(
                self._run_task,
                "interval",
                args=[name],
                id=name,
                replace_existing=True,
                seconds=seconds,
                coalesce=True,
                max_instances=1,
                misfire_grace_time=None,
            )

    def reload(self) -> None:
        try:
            new, digest = load_config_source(self.config_path)
        except UserError as e:
            log.error("config reload rejected, keeping the running config: %s", e)
            return
        changed = restart_only_changes(self.config, new)
        if changed:
            log.error(
                "config reload rejected: %s cannot change while the daemon runs; "
                "restart it to apply (keeping the running config)",
                ", ".join(changed),
            )
            return
        try:
            providers = build_providers(new, include_disabled=True)
        except Exception as e:  # a provider that cannot be built keeps the old ones
            log.error("config reload rejected: %s", str(e).splitlines()[0] if str(e) else e)
            return
        missing = live_on_missing(self.engine, providers)
        if missing:
            # Jobs running there would be watched, stopped and billed by nothing.
            log.error(
                "config reload rejected: %s; set enabled = false to place nothing new there "
                "(what runs is still watched and billed), and remove the section once they end "
                "(keeping the running config)",
                "; ".join(
                    f"provider {name} still runs {len(ids)} attempt(s) ({', '.join(ids[:3])})"
                    for name, ids in sorted(missing.items())
                ),
            )
            return
        changed_keys = changes(self.config, new)
        self.config, self.config_digest = new, digest
        self.reconciler.config = new
        self.reconciler.observe_only = observe_only(new)
        self.reconciler.providers = providers
        self._schedule()
        self._record_config()
        log.info(
            "config reloaded from %s: %s",
            self.config_path or "built-in defaults",
            f"{len(changed_keys)} change(s)" if changed_keys else "nothing changed",
        )
        for line in changed_keys:
            log.info("config reloaded: %s", line)

    def _record_config(self) -> None:
        """What this daemon runs with, beside its heartbeat (the CLI shows it)."""
        text = record(self.config, self.config_path, self.config_digest)
        try:
            if self.lease is not None:
                self.lease.record_config(text)
            elif self.record is not None:
                self.record.record_config(text)
        except Exception as e:  # the record is for people; the daemon goes on without it
            log.warning("could not record the running config: %s", str(e).splitlines()[0])

    def _banner(self) -> None:
        """What this daemon runs with, first thing in its log: which file, where its state
        is, which providers and budgets, where its metrics are."""
        facts = summary(self.config)
        log.info(
            "spotwise %s starting: config %s; state directory %s; database %s",
            _version(),
            self.config_path or "built-in defaults (no config file)",
            facts["state_dir"],
            facts["database"],
        )
        log.info("providers: %s; teams: %s", facts["providers"], facts["teams"])
        log.info("budgets: %s", facts["budgets"])
        log.info("metrics: %s", facts["metrics"])

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        self._banner()
        if self.config.daemon.metrics_port is not None:
            self.metrics.serve(self.config.daemon.metrics_port)
        if self.lease is not None:
            if not self._standby():
                log.info("stopped as a standby")
                self.lease.close()
                return 0
            self.lease.start()
            self._record_config()
            log.info("holding the lease (epoch %s): this daemon mutates", self.lease.epoch)
        systemd.notify("STATUS=first price poll")
        # Budgets first: a restarted daemon enforces hard limits before it launches anything.
        self._run_task("poll_prices")
        self._run_task("accrue")
        self._run_task("reconcile")
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(4)}, timezone="UTC"
        )
        self._schedule()
        self._scheduler.start()
        budget_stops = threading.Thread(
            target=self.reconciler.budget_stops.run,
            args=(self._stop,),
            name="budget-stops",
            daemon=True,
        )
        budget_stops.start()
        # Budget alerts to the webhook, from their own thread (never in a pass).
        webhooks = WebhookSender(self.reconciler.db, lambda: self.config)
        webhooks.start()
        systemd.notify("READY=1")
        log.info(
            "spotwise daemon running (providers: %s)",
            ", ".join(self.reconciler.providers) or "none",
        )
        if not self.reconciler.providers:
            log.warning(
                "no provider configured: nothing will be placed until [providers.aws], "
                "[providers.gcp] or [providers.azure] is set (then reload: SIGHUP)"
            )
        watchdog = systemd.watchdog_seconds()
        checked = time.monotonic()
        while not self._stop.is_set():
            if self._reload.wait(0.2):
                self._reload.clear()
                self.reload()
            if time.monotonic() - checked >= DATABASE_CHECK_SECONDS:
                checked = time.monotonic()
                gone = self._database_gone()
                if gone is not None:
                    # Nothing may touch that database again: writing on would go to an
                    # unlinked file no command reads, or (replaced) into another database,
                    # and a new SQLite connection there resets the WAL index the open ones
                    # have mapped (SIGBUS). Exit at once, as a kill would (every cloud call
                    # has its intent written first), and let systemd start a daemon on the
                    # file at the path.
                    log.error("%s while the daemon ran; stopping at once (exit %d)",
                              gone, EXIT_DATABASE_GONE)  # fmt: skip
                    logging.shutdown()
                    os._exit(EXIT_DATABASE_GONE)
            # WATCHDOG follows the loop's liveness: a pass finished recently, or the pass
            # now running is within its bound (pass_bound: every cloud call has a deadline,
            # so a live loop finishes each pass within it; a slow cloud is not a hang).
            if watchdog and self._alive(time.monotonic(), watchdog):
                systemd.notify("WATCHDOG=1")
        systemd.notify("STOPPING=1")
        log.info("stopping: no new placements; waiting for in-flight calls")
        self.reconciler.placing = False
        self._stop.set()
        self.reconciler.budget_stops.wake()  # it sees _stop and returns
        webhooks.stop()
        self._scheduler.shutdown(wait=True)
        budget_stops.join(timeout=self.config.daemon.call_timeout.total_seconds() + 5)
        if not self._lost.is_set():
            # The pass that saw an instance end had accrued to its own start, past the end;
            # the next accrual refunds that. Run it now, or a stopped daemon reports (and
            # budgets count) spend up to that pass instead of up to the end.
            self._run_task("accrue")
        if self.lease is not None:
            if self._lost.is_set():
                log.error(
                    "exiting (%d) after losing the lease: %s; restart to stand by",
                    EXIT_LEASE_LOST,
                    self.lease.lost,
                )
                self.lease.close()
                return EXIT_LEASE_LOST
            self.lease.release()  # after in-flight work: a standby may take over at once
            self.lease.close()
        if self.record is not None:
            self.record.release()
        if self.lock is not None:
            self.lock.release()
        log.info("stopped")
        return 0


def live_on_missing(engine: Engine, providers: Mapping[str, object]) -> dict[str, list[str]]:
    """provider -> its live attempts, for the providers `providers` lacks."""
    out: dict[str, list[str]] = {}
    with Session(engine) as s:
        for aid, name in s.exec(
            select(Attempt.id, Attempt.provider).where(
                col(Attempt.state).in_(
                    (AttemptState.LAUNCHING, AttemptState.RUNNING, AttemptState.STOPPING)
                )
            )
        ).all():
            if name not in providers:
                out.setdefault(name, []).append(aid)
    return out


def _file_identity(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of a file, None when it does not exist (or there is no file)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _schema() -> str:
    from scheduler.state.revisions import head_revision

    return head_revision()


def _version() -> str:
    from scheduler.state.installed import version

    return version()
