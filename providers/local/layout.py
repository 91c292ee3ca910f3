"""The local market's on-disk layout that readers may know without a market: where each
instance's directory is and where the market's time origin is read.

`spotwise show` and `logs` print an instance's log paths and every read command shows times
on the market's clock; none of them starts a market, writes its state or imports its code
(state.py, the market's own records, lists the whole layout).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

# Under the market's state_dir: one directory per instance (its records, see state.py).
INSTANCES_DIR = "instances"
# Under the market's state_dir: when market time started (written once, by the market).
EPOCH_FILE = "epoch"


def instance_dir(state_dir: Path, instance_id: str) -> Path:
    """Where one local instance lives: its spec and records, its job's stdout.log and
    stderr.log, and its working directory. Needs no market (so read commands start none)."""
    return state_dir / INSTANCES_DIR / instance_id


def read_epoch(state_dir: Path) -> datetime | None:
    """The market's time origin if a market has set one, else None; never writes (what read
    commands use: they must not create the state they only look at)."""
    try:
        text = (state_dir / EPOCH_FILE).read_text().strip()
    except (OSError, ValueError):  # ValueError: a path no file can have (a NUL in it)
        return None
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
