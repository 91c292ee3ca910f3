"""What every request of the API server reads from: the database (the read commands' own
connection and an engine for the desired-state writes), the configuration the daemon runs
with, its clock, and the providers `prices` and `report` ask.

The daemon's recorded configuration is read again after a few seconds, so a reload of the
daemon shows here without restarting the server; the providers' answers are kept for a
minute (a hundred dashboards refreshing must not each poll every cloud).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.core.config import Config
from scheduler.core.read_settings import ReadSettings
from scheduler.state.files import load_config
from scheduler.state.read_connection import open_for_reading

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from providers.base import Provider
    from scheduler.state.read_connection import Database

CONFIG_SECONDS = 5.0  # how long the daemon's recorded config is reused
PRICES_SECONDS = 60.0  # how long the providers' offerings are reused


class ServerContext:
    """The server's view of one spotwise database; safe to share between request threads."""

    def __init__(self, config_path: str | Path | None = None, config: Config | None = None):
        from scheduler.state.db import open_existing

        self.own = config or load_config(config_path)
        url = self.own.daemon.resolved_database_url()
        self.db: Database = open_for_reading(url)
        self.engine: Engine = open_existing(url)
        self._lock = threading.RLock()
        self._config: tuple[float, Config] | None = None
        self._cached: dict[str, tuple[float, Any]] = {}

    def config(self) -> Config:
        """The configuration the daemon runs with (its budgets, teams, providers), else the
        server's own file's."""
        from scheduler.state.read_models import running_config_text
        from scheduler.state.running_config import parse

        now = time.monotonic()
        with self._lock:
            if self._config is not None and now - self._config[0] < CONFIG_SECONDS:
                return self._config[1]
        running = parse(running_config_text(self.db))
        cfg = running.config if running is not None else self.own
        with self._lock:
            self._config = (now, cfg)
        return cfg

    def read_settings(self) -> ReadSettings:
        """What the read models need of `config()` (core.read_settings)."""
        return ReadSettings.of_config(self.config())

    def clock(self) -> Any:
        from scheduler.daemon.wiring import clock_for

        return clock_for(self.config(), read_only=True)

    def now(self) -> datetime:
        """Now on the daemon's clock (the local market's may run ahead of the wall)."""
        return self.clock().now()  # type: ignore[no-any-return]

    def cached(self, key: str, seconds: float, make: Callable[[], Any]) -> Any:
        """`make()`, reused for `seconds` under `key` (one maker at a time per key)."""
        now = time.monotonic()
        hit = self._cached.get(key)
        if hit is not None and now - hit[0] < seconds:
            return hit[1]
        with self._lock:
            hit = self._cached.get(key)
            if hit is not None and now - hit[0] < seconds:
                return hit[1]
            value = make()
            self._cached[key] = (time.monotonic(), value)
            return value

    def providers(self) -> dict[str, Provider]:
        from scheduler.daemon.wiring import build_providers

        return self.cached(  # type: ignore[no-any-return]
            "providers", PRICES_SECONDS, lambda: build_providers(self.config(), read_only=True)
        )
