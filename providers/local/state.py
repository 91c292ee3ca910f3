"""On-disk state shared by the market (daemon side) and the per-instance supervisors.

Stdlib only. Every record is a small JSON file written atomically (temp file + rename), so a
reader never sees half a record and either process may crash at any point.

    <state_dir>/epoch            real (or clock) time at which market time started; never moved
    <state_dir>/market.json      speedup, trace, trace_start offset, self_watch, grace, kill_after
    <state_dir>/instances/<id>/  spec.json, launch.lock, supervisor.lock, supervisor.json,
                                 job.json, notice.json (the job's notice file), end.json,
                                 interrupt.request, terminate.request, stdout.log, stderr.log, work/
    <state_dir>/live/<id>        an empty marker per instance not yet seen ended: the hot set
                                 listings walk, so they never touch the history
    <state_dir>/ended.index      "<ended_at epoch s> <id>" per retired instance: what prune reads

Locks (flock, so they die with their holder): the launcher holds launch.lock from writing the
spec until the supervisor has started the job; the supervisor holds supervisor.lock for its
whole life. Whoever records a verdict for an unsupervised instance holds both.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from providers.local.layout import EPOCH_FILE

SPEC = "spec.json"
LOCK = "supervisor.lock"
SUPERVISOR = "supervisor.json"
JOB = "job.json"
NOTICE = "notice.json"
END = "end.json"
INTERRUPT = "interrupt.request"
TERMINATE = "terminate.request"
LAUNCH_LOCK = "launch.lock"
ENDED_DIR = "ended"
# In every job's environment: finds its processes even after they left its process group.
# The id alone is not enough: it derives from the launch token, so two markets on one host
# (two daemons, two test workers) can share one; the notice file's path names the market.
ENV_INSTANCE_ID = "SPOTWISE_INSTANCE_ID"
ENV_NOTICE_FILE = "SPOTWISE_NOTICE_FILE"


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A record, or None when absent or unreadable (corrupt, truncated, not an object): one
    damaged file must never make a caller raise."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def create_once(path: Path, data: Any) -> bool:
    """Create a request file unless it exists; True if this call created it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return True


def supervisor_alive(instance_dir: Path) -> bool:
    """The supervisor holds an flock on its lock file for its whole life (robust to pid reuse)."""
    return lock_held(instance_dir / LOCK)


def try_lock(path: Path) -> int | None:
    """An exclusive flock on `path` (created if missing) without waiting: the fd, or None if
    someone holds it. Raises FileNotFoundError if the directory is gone (moved)."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def lock_held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our probe lock if we got it
    return False


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, pgrp) of a process from /proc, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[2])
    except (IndexError, ValueError):
        return None


def _has_marker(pid: int, marker: bytes, instance_dir: Path) -> bool:
    """The process carries this instance's id, and its notice file lies in this instance's
    directory (the same id in another market's directory is another job)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return False
    if marker not in env:
        return False
    prefix = f"{ENV_NOTICE_FILE}=".encode()
    for item in env:
        if item.startswith(prefix):
            where = os.path.dirname(os.fsdecode(item[len(prefix) :]))
            try:  # one directory, however reached (symlinks, bind mounts)
                return os.path.samefile(where, instance_dir)
            except OSError:  # gone: only the same path can be ours
                return os.path.realpath(where) == os.path.realpath(instance_dir)
    return False


def job_processes(instance_dir: Path, pgid: int | None) -> tuple[set[int], set[int]]:
    """Live (non-zombie) processes of one instance's job: (process groups, lone pids).

    A process is the job's if it carries the instance's marker in its environment, so a
    recycled pgid is never mistaken for the job; a marked process outside the job's group (a
    setsid'd child) comes back as a lone pid. Without /proc: the recorded group, trusted."""
    marker = f"{ENV_INSTANCE_ID}={instance_dir.name}".encode()
    groups: set[int] = set()
    lone: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return ({pgid} if pgid else set()), set()
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        st = _proc_stat(pid)
        if st is None or st[0] in ("Z", "X") or not _has_marker(pid, marker, instance_dir):
            continue
        if pgid and st[1] == pgid:
            groups.add(pgid)
        else:
            lone.add(pid)
    return groups, lone


def kill_job(instance_dir: Path, pgid: int | None, within_s: float = 2.0) -> tuple[int, int]:
    """SIGKILL every process of the job (its group, then stragglers) until none is left or
    `within_s` passes: (groups/processes found alive at first, still alive at the end)."""
    if not os.path.isdir("/proc"):
        if pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        return (1 if pgid else 0), 0
    deadline = time.monotonic() + within_s
    found = -1
    while True:
        groups, lone = job_processes(instance_dir, pgid)
        if found < 0:
            found = len(groups) + len(lone)
        if not groups and not lone:
            return found, 0
        if time.monotonic() > deadline:
            return found, len(groups) + len(lone)
        for g in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(g, signal.SIGKILL)
        for p in lone:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.02)


def ensure_epoch(state_dir: Path, now: datetime) -> datetime:
    """The market's time origin: set once on first use, then read by every later process."""
    path = state_dir / EPOCH_FILE
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        for _ in range(50):  # a concurrent creator may not have written it yet
            text = path.read_text().strip()
            if text:
                return datetime.fromisoformat(text)
            time.sleep(0.01)
        path.write_text(now.isoformat())  # the first creator crashed before writing it
        return now
    with os.fdopen(fd, "w") as f:
        f.write(now.isoformat())
    return now


@dataclass(frozen=True)
class MarketTime:
    """market offset (seconds into the trace) = trace_start + (now - epoch) * speedup."""

    epoch: datetime
    speedup: float
    trace_start_s: float

    def offset(self, now: datetime) -> float:
        return self.trace_start_s + (now - self.epoch).total_seconds() * self.speedup

    def real_time_of(self, offset: float) -> datetime:
        return self.epoch + timedelta(seconds=(offset - self.trace_start_s) / self.speedup)


def load_market(state_dir: Path) -> tuple[MarketTime, dict[str, Any]] | None:
    cfg = read_json(state_dir / "market.json")
    epoch_file = state_dir / EPOCH_FILE
    if cfg is None or not epoch_file.exists():
        return None
    epoch = datetime.fromisoformat(epoch_file.read_text().strip())
    return MarketTime(epoch, float(cfg["speedup"]), float(cfg["trace_start_s"])), cfg


ENDED_INDEX = "ended.index"  # "<ended_at epoch seconds> <id>" per line, for prune


def _locked(path: Path) -> int:
    """An fd on `path` holding its exclusive flock, on the file the name points at now (a
    rewrite replaces the file; a writer that locked the old one tries again)."""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_APPEND, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        os.close(fd)


def append_line(path: Path, line: str) -> None:
    fd = _locked(path)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def rewrite_lines(path: Path, keep: Any) -> None:
    """Drop the lines `keep(line)` rejects, atomically and under the index's lock."""
    fd = _locked(path)
    try:
        lines = read_lines(path)
        kept = [line for line in lines if keep(line)]
        if len(kept) != len(lines):
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept))
            os.replace(tmp, path)
    finally:
        os.close(fd)
