"""Where spotwise keeps its state when the config names no `daemon.state_dir`.

The daemon and every command find it the same way, and a read command finds it before (or
without) validating the config, so this lives apart from the config's models.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_state_dir() -> Path:
    """$STATE_DIRECTORY (systemd's StateDirectory=), else the XDG state directory."""
    systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spotwise"


def default_database_url(state_dir: Path) -> str:
    """The database a config without `daemon.database_url` uses: SQLite under state_dir."""
    return f"sqlite:///{state_dir / 'spotwise.db'}"
