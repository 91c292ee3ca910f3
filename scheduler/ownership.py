"""One daemon mutates a database: a lock on its state directory and a heartbeat row.

On one host, an flock on `<state_dir>/daemon.lock` (released by the kernel when the process
dies, kill -9 included). Across hosts (a database URL two daemons share), the DaemonLease row:
a second daemon refuses while the first one's heartbeat is fresh. The CLI reads the same row
to say whether a daemon is running ("daemon not seen for 2m").
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from scheduler.errors import UserError
from scheduler.models import DaemonLease

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
    started_at: datetime
    renewed_at: datetime
    status: str

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

    def claim(self, version: str) -> None:
        """Take the row unless another live daemon's heartbeat is fresh."""
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
        return Heartbeat(row.holder, row.pid, row.host, row.started_at, row.renewed_at, row.status)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
