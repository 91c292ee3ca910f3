"""What the read commands need of a configuration, as plain values.

`status`, `show`, `events` and `logs` need four things from a config beside where its
database is: where the local market keeps its instances, its speed-up, which clouds are on
(a sped-up clock only when the local market is alone), and the reconcile interval (when a
silent daemon is stale). The
validated `Config` holds them, but building it (pydantic and every cloud's settings) costs
those commands more than their queries. So they read these values instead: from a `Config`
the command validated itself, or from the daemon's record of the config it validated
(`state.vouched_config`), without pydantic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:  # this module is on every read command's path: the standard library only
    from scheduler.core.config import Config

CLOUDS = ("aws", "gcp", "azure")
# A daemon that has not beaten for this long (at least) is stale, whatever its interval.
MIN_STALE_SECONDS = 60.0
# ... else six of its reconcile intervals, on its clock.
STALE_INTERVALS = 6


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """The read commands' view of a config (state directories resolved)."""

    reconcile_interval_s: float
    clouds: tuple[str, ...]  # the cloud providers configured, enabled or not
    local_speedup: float | None  # None: no local market configured
    local_state_dir: Path  # where the local market keeps its instances (its default if off)

    @property
    def speedup(self) -> float:
        """The clock's speed-up: the local market's when it is the only provider, else 1."""
        if self.local_speedup is None or self.clouds:
            return 1.0
        return self.local_speedup

    @property
    def stale_after_s(self) -> float:
        """Seconds (wall clock) after which a daemon's heartbeat is stale."""
        return max(MIN_STALE_SECONDS, STALE_INTERVALS * self.reconcile_interval_s / self.speedup)

    @classmethod
    def of_config(cls, config: Config) -> ReadSettings:
        from scheduler.core.config import local_settings

        p = config.providers
        local_dir = (
            local_settings(config).resolved_state_dir()
            if p.local is not None
            else config.daemon.resolved_state_dir() / "local"
        )
        return cls(
            reconcile_interval_s=config.daemon.reconcile_interval.total_seconds(),
            clouds=tuple(c for c in CLOUDS if getattr(p, c) is not None),
            local_speedup=float(p.local.speedup) if p.local is not None else None,
            local_state_dir=Path(local_dir),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reconcile_interval_s": self.reconcile_interval_s,
            "clouds": list(self.clouds),
            "local_speedup": self.local_speedup,
            "local_state_dir": str(self.local_state_dir),
        }

    @classmethod
    def from_json(cls, doc: Any) -> ReadSettings | None:
        """Back from `to_json`; None for anything else (a record this spotwise cannot read)."""
        if not isinstance(doc, dict):
            return None
        interval, clouds = doc.get("reconcile_interval_s"), doc.get("clouds")
        speedup, local_dir = doc.get("local_speedup"), doc.get("local_state_dir")
        if (
            not _positive(interval)
            or not isinstance(clouds, list)
            or not all(c in CLOUDS for c in clouds)
            or not (speedup is None or _positive(speedup))
            or not isinstance(local_dir, str)
            or not local_dir.startswith("/")
            or "\x00" in local_dir  # no file has such a name: the record was edited
        ):
            return None
        return cls(
            reconcile_interval_s=float(interval),
            clouds=tuple(clouds),
            local_speedup=None if speedup is None else float(speedup),
            local_state_dir=Path(local_dir),
        )


def _positive(value: Any) -> TypeGuard[float]:
    """A finite number above zero, as the config's validation allows (JSON also reads
    Infinity and NaN, and a bool is an int to Python)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
