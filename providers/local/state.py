"""On-disk state shared by the market (daemon side) and the per-instance supervisors.

Stdlib only. Every record is a small JSON file written atomically (temp file + rename), so a
reader never sees half a record and either process may crash at any point.

    <state_dir>/epoch            real (or clock) time at which market time started; never moved
    <state_dir>/market.json      speedup, trace, trace_start offset, self_watch, grace, kill_after
    <state_dir>/instances/<id>/  spec.json, supervisor.lock, supervisor.json, job.json,
                                 notice.json (the job's notice file), end.json,
                                 interrupt.request, terminate.request, stdout.log, stderr.log, work/
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SPEC = "spec.json"
LOCK = "supervisor.lock"
SUPERVISOR = "supervisor.json"
JOB = "job.json"
NOTICE = "notice.json"
END = "end.json"
INTERRUPT = "interrupt.request"
TERMINATE = "terminate.request"


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


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
    try:
        fd = os.open(instance_dir / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our probe lock if we got it
    return False


def ensure_epoch(state_dir: Path, now: datetime) -> datetime:
    """The market's time origin: set once on first use, then read by every later process."""
    path = state_dir / "epoch"
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
    epoch_file = state_dir / "epoch"
    if cfg is None or not epoch_file.exists():
        return None
    epoch = datetime.fromisoformat(epoch_file.read_text().strip())
    return MarketTime(epoch, float(cfg["speedup"]), float(cfg["trace_start_s"])), cfg
