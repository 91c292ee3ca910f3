"""Whether a daemon keeps this database: the stale-daemon warning every read prints, from
the heartbeat row, with the same words on the command line and from the API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # every command imports this: the standard library alone at run time
    from scheduler.core.read_settings import ReadSettings


def ago(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def daemon_warning(settings: ReadSettings, lease: dict[str, Any] | None) -> str | None:
    """A line to print when no daemon is keeping this database (else None), from its
    heartbeat `lease` (read_models.daemon_heartbeat; None: there is none). Lines for a daemon
    that should be running but is silent start with 'daemon not seen'."""
    if lease is None:
        return "no spotwise daemon has run on this database yet: start one (spotwise daemon)"
    age = (datetime.now(UTC) - lease["renewed_at"]).total_seconds()
    stale = settings.stale_after_s
    if lease["status"] == "stopped":
        return f"the spotwise daemon stopped {ago(age)} ago: start it (spotwise daemon)"
    if age > stale:
        return f"daemon not seen for {ago(age)} (pid {lease['pid']} on {lease['host']})"
    return None
