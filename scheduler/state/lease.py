"""One daemon mutates a database: on SQLite a lock and a heartbeat, on PostgreSQL a lease.

SQLite: an flock on `<state_dir>/daemon.lock` (released by the kernel when the process dies,
kill -9 included) and the DaemonLease row as a heartbeat (DaemonRecord): a second daemon
refuses while the first one's heartbeat is fresh.

PostgreSQL (Lease): replicas share the DaemonLease row. The holder renews it every
`lease_renew`; a standby locks it FOR UPDATE and takes it, with epoch + 1, once it has not
been renewed for `lease_ttl` (judged by the database's clock, so host clocks may differ).
Every write transaction of the holder first locks the row FOR KEY SHARE where holder and
epoch are still its own (`check`), so a stale holder's writes are rejected in the very
transaction that would have made them, and a takeover waits for a write in flight to end
(while the holder's renewals, which touch no key column, do not). A takeover of an expired
lease first ends the old holder's sessions, found by name, so that a transaction a paused
holder left open is rolled back instead of holding the row until the holder runs again. A
holder that has not renewed for `lease_deadline` (its monotonic clock, from before the
renewal was sent) stops calling clouds and writing (`guard`), before a standby can take it.
The CLI reads the same row to say who holds it and whether it is alive.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from providers.base import TransientError
from scheduler.core.errors import UserError
from scheduler.state.models import DaemonLease

log = logging.getLogger("spotwise.lease")

LEASE_NAME = "daemon"


def real_now() -> datetime:
    """Heartbeats are real time (the CLI compares them with the wall clock)."""
    return datetime.now(UTC)


class StateLock:
    """An exclusive flock on the state directory, held for the daemon's whole life."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            raise UserError(f"state_dir {self.path.parent} is not usable: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(
                f"another spotwise daemon (pid {pid}) owns {self.path.parent}; stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    holder: str
    pid: int
    host: str
    started_at: datetime  # when this holder took the lease (or started, on SQLite)
    renewed_at: datetime
    status: str
    epoch: int = 0

    def age(self, now: datetime | None = None) -> timedelta:
        return (now or real_now()) - self.renewed_at


class DaemonRecord:
    """This daemon's row in DaemonLease: claimed at start, renewed every pass."""

    def __init__(self, engine: Engine, stale_after: timedelta) -> None:
        self.engine = engine
        self.stale_after = stale_after
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.holder = f"{self.host}:{self.pid}:{secrets.token_hex(4)}"

    def claim(self, version: str, config_json: str = "") -> None:
        """Take the row unless another live daemon's heartbeat is fresh; `config_json` is
        the configuration this daemon runs with (state.running_config.record)."""
        now = real_now()
        with Session(self.engine) as s:
            row = s.get(DaemonLease, LEASE_NAME)
            if (
                row is not None
                and row.holder != self.holder
                and now - row.renewed_at < self.stale_after
            ):
                same_host = row.host == self.host
                alive = same_host and _pid_alive(row.pid)
                if not same_host or alive:
                    raise UserError(
                        f"another spotwise daemon (pid {row.pid} on {row.host}) owns this "
                        f"database (heartbeat {int((now - row.renewed_at).total_seconds())}s "
                        "ago); stop it first"
                    )
            if row is None:
                row = DaemonLease(
                    name=LEASE_NAME,
                    holder=self.holder,
                    pid=self.pid,
                    host=self.host,
                    started_at=now,
                    renewed_at=now,
                )
            row.holder, row.pid, row.host = self.holder, self.pid, self.host
            row.epoch += 1
            row.started_at = row.renewed_at = now
            row.version, row.status = version, "starting"
            row.config_json = config_json
            s.add(row)
            s.commit()

    def record_config(self, config_json: str) -> None:
        """After a reload: the configuration the daemon now runs with."""
        with Session(self.engine) as s:
            row = s.get(DaemonLease, LEASE_NAME)
            if row is None or row.holder != self.holder:
                return
            row.config_json = config_json
            s.add(row)
            s.commit()

    def beat(self, status: str) -> None:
        with Session(self.engine) as s:
            row = s.get(DaemonLease, LEASE_NAME)
            if row is None or row.holder != self.holder:
                return  # someone took over (PostgreSQL replicas): the lease code handles it
            row.renewed_at = real_now()
            row.status = status
            s.add(row)
            s.commit()

    def release(self) -> None:
        """On a clean stop: mark the heartbeat so the CLI says 'stopped', not 'stale'."""
        with Session(self.engine) as s:
            row = s.get(DaemonLease, LEASE_NAME)
            if row is not None and row.holder == self.holder:
                row.status = "stopped"
                s.add(row)
                s.commit()


def read_heartbeat(engine: Engine) -> Heartbeat | None:
    with Session(engine) as s:
        row = s.get(DaemonLease, LEASE_NAME)
        if row is None:
            return None
        return Heartbeat(
            row.holder, row.pid, row.host, row.started_at, row.renewed_at, row.status, row.epoch
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseLost(TransientError):
    """This daemon no longer holds the lease: the write or cloud call must not happen."""


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    """Real seconds; statement_timeout < renew < deadline < ttl (checked by the config)."""

    ttl: float = 30.0
    renew: float = 10.0
    deadline: float = 20.0
    statement_timeout: float = 5.0

    @classmethod
    def of(cls, daemon: object) -> LeaseTimings:
        def sec(key: str) -> float:
            value: timedelta = getattr(daemon, key)
            return value.total_seconds()

        return cls(
            sec("lease_ttl"),
            sec("lease_renew"),
            sec("lease_deadline"),
            sec("lease_statement_timeout"),
        )

    def __post_init__(self) -> None:
        if not 0 < self.statement_timeout < self.renew < self.deadline < self.ttl:
            raise ValueError("lease timings need statement_timeout < renew < deadline < ttl")


_NOW = "(clock_timestamp() AT TIME ZONE 'UTC')"  # the server's clock, naive UTC like our columns
# Taking the lease: the row is created if absent (the first daemon ever), then locked FOR
# UPDATE, which waits for every write transaction of the holder still in flight (each holds
# the row FOR KEY SHARE, see _FENCE), then taken only if expired or released.
_CREATE = sa.text(
    f"""
    INSERT INTO daemonlease (name, holder, pid, host, epoch, started_at, renewed_at, version,
                             status)
    VALUES (:name, :holder, :pid, :host, 1, {_NOW}, {_NOW}, :version, 'starting')
    ON CONFLICT (name) DO NOTHING
    RETURNING epoch
    """
)
# Not renewed for lease_ttl by the server's clock; expired = that, or released.
_STALE = f"renewed_at < {_NOW} - make_interval(secs => :ttl)"
_EXPIRED = f"({_STALE} OR status = 'stopped')"
_TAKEABLE = sa.text(f"SELECT {_EXPIRED} FROM daemonlease WHERE name = :name")
# NO KEY UPDATE: the holder's renewals (an UPDATE of no key column) wait behind it, its
# write transactions (FOR KEY SHARE) do not.
_HOLD = sa.text("SELECT epoch FROM daemonlease WHERE name = :name FOR NO KEY UPDATE")
_LOCK = sa.text("SELECT epoch FROM daemonlease WHERE name = :name FOR UPDATE")
_TAKE = sa.text(
    f"""
    UPDATE daemonlease
       SET holder = :holder, pid = :pid, host = :host, epoch = epoch + 1,
           started_at = {_NOW}, renewed_at = {_NOW}, version = :version, status = 'starting'
     WHERE name = :name AND {_EXPIRED}
    RETURNING epoch
    """
)
# A holder's sessions are named SESSION_PREFIX + the last part of its holder id. Only a stale,
# unreleased lease's holder is ended (_STALE's columns exist only in daemonlease).
SESSION_PREFIX = "spotwise-"
_END_EXPIRED = sa.text(
    f"""
    SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))
      FROM pg_stat_activity a
      JOIN daemonlease l ON l.name = :name
     WHERE a.datname = current_database()
       AND a.pid <> pg_backend_pid()
       AND a.application_name = '{SESSION_PREFIX}' || substring(l.holder from '[^:]*$')
       AND l.holder <> :holder
       AND l.status <> 'stopped'
       AND {_STALE}
    """
)
_RENEW = sa.text(
    f"UPDATE daemonlease SET renewed_at = {_NOW}, status = :status "
    "WHERE name = :name AND holder = :holder AND epoch = :epoch"
)
# KEY SHARE, not SHARE: it still makes a takeover (FOR UPDATE) wait for this transaction,
# but not the holder's own renewal (an UPDATE of no key column), so a long write
# transaction cannot starve the renewals and cost the holder its lease.
_FENCE = sa.text(
    "SELECT epoch FROM daemonlease WHERE name = :name AND holder = :holder AND epoch = :epoch "
    "FOR KEY SHARE"
)
_RECORD_CONFIG = sa.text(
    "UPDATE daemonlease SET config_json = :config_json "
    "WHERE name = :name AND holder = :holder AND epoch = :epoch"
)
_RELEASE = sa.text(
    "UPDATE daemonlease SET status = 'stopped' "
    "WHERE name = :name AND holder = :holder AND epoch = :epoch"
)


class Lease:
    """This daemon's side of the PostgreSQL lease: acquire (standby), renew (own thread,
    independent of slow cloud calls and passes), fence (every write), release (clean stop).

    Once lost it stays lost: the daemon exits and starts again as a standby, so nothing it
    kept in memory outlives its term.
    """

    def __init__(
        self,
        url: str,
        timings: LeaseTimings,
        version: str,
        *,
        on_lost: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        from scheduler.state.db import make_engine

        self.timings = timings
        self.version = version
        self.host = socket.gethostname()
        self.pid = os.getpid()
        token = secrets.token_hex(4)
        self.holder = f"{self.host}:{self.pid}:{token}"
        # Every session of this daemon carries it, so that a standby taking over an expired
        # lease can end them (and the locks they hold) by name: see _END_EXPIRED.
        self.session_name = f"{SESSION_PREFIX}{token}"
        ms = int(timings.statement_timeout * 1000)
        # Its own small pool: a renewal never queues behind the passes' connections, and no
        # lease statement (a takeover waiting on a row lock included) runs past its timeout.
        self.engine = make_engine(
            url,
            pg_settings={
                "statement_timeout": ms,
                "lock_timeout": ms,
                "idle_in_transaction_session_timeout": ms,
            },
            application_name=self.session_name,
        )
        self.epoch: int | None = None
        self.status = "starting"
        self._monotonic = monotonic
        self._renewed: float | None = None  # monotonic time the last good renewal was sent
        self._lost: str | None = None
        self._on_lost = on_lost
        self._lock = threading.Lock()  # one renewal at a time
        self._lost_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_cannot_end: str | None = None  # the last such warning, said once

    # -- acquiring (standby) -----------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired or released. A lease that is neither is
        left without taking any lock (a poll never delays the holder). Otherwise one
        transaction: hold the row against renewals, end the expired holder's sessions, lock
        the row FOR UPDATE (which waits for the holder's writes still in flight) and take it."""
        sent = self._monotonic()
        params = {
            "name": LEASE_NAME,
            "holder": self.holder,
            "pid": self.pid,
            "host": self.host,
            "version": self.version,
            "ttl": self.timings.ttl,
        }
        with self.engine.begin() as c:
            epoch = c.execute(_CREATE, params).scalar()
            if epoch is None and c.execute(_TAKEABLE, params).scalar():
                c.execute(_HOLD, params)
                self._end_expired_sessions(c, params)
                c.execute(_LOCK, params)
                epoch = c.execute(_TAKE, params).scalar()
        if epoch is None:
            return False
        with self._lock:
            self.epoch, self._renewed, self._lost = int(epoch), sent, None
        log.info("took the lease as %s (epoch %d)", self.holder, epoch)
        return True

    def _end_expired_sessions(self, c: sa.Connection, params: dict[str, object]) -> None:
        """End the sessions of a holder whose lease has expired, so that a transaction it left
        open (a paused or wedged process) releases the lease row now. The server's
        idle_in_transaction_session_timeout is not enough: PostgreSQL does not re-arm it after
        a pipeline's trailing flush, which psycopg's executemany sends. The caller holds the
        row against renewals (_HOLD), so the holder cannot renew in between; it is past its
        lease_deadline and writes nothing more, so nothing it meant to keep is lost, and a
        transaction it had open is rolled back whole. Best effort, in a savepoint: a role that
        may not signal the holder's sessions (another role without pg_signal_backend, or a
        superuser holder) is warned about, and the takeover waits for them instead."""
        try:
            with c.begin_nested():
                ended = c.execute(_END_EXPIRED, params).scalar() or 0
        except sa.exc.DBAPIError as e:
            why = _first_line(e)
            if why != self._said_cannot_end:
                self._said_cannot_end = why
                log.warning(
                    "standby: cannot end the expired holder's sessions (%s); the takeover "
                    "waits for them to end",
                    why,
                )
            return
        if ended:
            log.info("standby: ended %d session(s) of the expired lease holder", ended)

    def wait_acquire(
        self, stop: threading.Event, waiting: Callable[[Heartbeat | None], None] | None = None
    ) -> bool:
        """Block as a standby (no writes, no cloud calls) until the lease is ours; False if
        `stop` was set first. A database that does not answer is retried, never fatal."""
        said: tuple[str, int] | None = None
        while not stop.is_set():
            try:
                if self.try_acquire():
                    return True
                hb = read_heartbeat(self.engine)
            except sa.exc.DBAPIError as e:
                log.warning("standby: cannot reach the database: %s", _first_line(e))
                hb = None
            else:
                if hb is not None and (hb.holder, hb.epoch) != said:
                    said = (hb.holder, hb.epoch)
                    log.info(
                        "standby: the lease is held by pid %d on %s (epoch %d) since %s",
                        hb.pid,
                        hb.host,
                        hb.epoch,
                        hb.started_at.isoformat(timespec="seconds"),
                    )
            if waiting is not None:
                waiting(hb)
            stop.wait(self.timings.renew)
        return False

    # -- holding -----------------------------------------------------------------------------
    def start(self) -> None:
        """Renew on a thread of its own until released or lost."""
        self._thread = threading.Thread(target=self._renew_loop, name="lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.timings.renew):
            if self._lost is not None:
                return
            self.renew()

    def renew(self) -> bool:
        """Renew once; False (and the lease lost) when another daemon has it, or when no
        renewal succeeded within the deadline."""
        with self._lock:
            if self._lost is not None or self.epoch is None:
                return False
            sent = self._monotonic()
            try:
                with self.engine.begin() as c:
                    n = c.execute(
                        _RENEW,
                        {
                            "status": self.status,
                            "name": LEASE_NAME,
                            "holder": self.holder,
                            "epoch": self.epoch,
                        },
                    ).rowcount
            except sa.exc.DBAPIError as e:
                log.warning("lease renewal failed: %s", _first_line(e))
                self._expire_if_late()
                return self._lost is None
            if n == 1:
                self._renewed = sent
                return True
        self._lose(self._taken_message())
        return False

    def beat(self, status: str) -> None:
        """The pass's heartbeat: what the CLI shows, written with a renewal."""
        self.status = status
        self.renew()

    def _expire_if_late(self) -> None:
        renewed = self._renewed
        if renewed is not None and self._monotonic() - renewed >= self.timings.deadline:
            self._lose(f"no renewal succeeded within lease_deadline ({self.timings.deadline:g}s)")

    def _taken_message(self) -> str:
        try:
            hb = read_heartbeat(self.engine)
        except sa.exc.DBAPIError:
            hb = None
        if hb is None or hb.holder == self.holder:
            return f"the lease (epoch {self.epoch}) is no longer ours"
        return f"the lease was taken by pid {hb.pid} on {hb.host} (epoch {hb.epoch})"

    def _lose(self, why: str) -> None:
        """Mark the lease lost once and tell the daemon (`on_lost` must not block)."""
        with self._lost_lock:
            if self._lost is not None:
                return
            self._lost = why
        log.error("lease lost: %s; this daemon stops mutating", why)
        if self._on_lost is not None:
            self._on_lost(why)

    @property
    def lost(self) -> str | None:
        return self._lost

    def valid(self) -> bool:
        """Held and renewed within the deadline, by this process's clock (no I/O)."""
        renewed = self._renewed
        if self._lost is not None or self.epoch is None or renewed is None:
            return False
        if self._monotonic() - renewed >= self.timings.deadline:
            self._expire_if_late()
            return False
        return True

    def guard(self) -> None:
        """Before a cloud call or any mutation outside the database: raise unless valid."""
        if not self.valid():
            raise LeaseLost(f"not the lease holder: {self._lost or 'lease not held'}")

    def check(self, s: Session) -> None:
        """First statement of every write transaction: lock the row where it is still ours
        (FOR KEY SHARE: a takeover waits for this transaction), or raise and write nothing."""
        try:
            self.guard()
        except LeaseLost as e:
            log.warning("write rejected: %s", e)
            raise
        row = s.execute(
            _FENCE, {"name": LEASE_NAME, "holder": self.holder, "epoch": self.epoch}
        ).first()
        if row is None:
            why = self._taken_message()
            log.warning("write rejected: %s", why)
            self._lose(why)
            raise LeaseLost(f"not the lease holder: {why}")

    def record_config(self, config_json: str) -> None:
        """The configuration this holder runs with, beside the heartbeat (fenced: a holder
        that lost the lease writes nothing)."""
        self.guard()
        with self.engine.begin() as c:
            c.execute(
                _RECORD_CONFIG,
                {
                    "config_json": config_json,
                    "name": LEASE_NAME,
                    "holder": self.holder,
                    "epoch": self.epoch,
                },
            )

    # -- stopping ----------------------------------------------------------------------------
    def release(self) -> None:
        """On a clean stop (after in-flight work ended): mark the row so a standby takes over
        at once instead of waiting for the TTL."""
        self._stop.set()
        with self._lost_lock:
            epoch, self._lost = self.epoch, self._lost or "released"
        if epoch is None:
            return
        try:
            with self.engine.begin() as c:
                c.execute(_RELEASE, {"name": LEASE_NAME, "holder": self.holder, "epoch": epoch})
        except sa.exc.DBAPIError as e:
            log.warning("could not release the lease (it expires by itself): %s", _first_line(e))

    def close(self) -> None:
        self._stop.set()
        self.engine.dispose()


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__
