"""`checkpoint.interval = "auto"`: checkpoint as often as the daemon says the pool deserves.

The daemon passes the first interval at launch ($SPOTWISE_CHECKPOINT_INTERVAL) and
rewrites checkpoint_interval.json in the store when the pool's hazard or the measured save
time moves it (scheduler.core.checkpointing). Rank 0 re-reads that file at most every
READ_EVERY seconds (one small GET) and follows it; a document written for another job is
ignored, and an unreadable one keeps the interval it had. Without a daemon (a run by hand)
the interval stays at the launch value, else DEFAULT_SECONDS.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from trainer import contract

log = logging.getLogger("trainer.interval")

READ_EVERY = 30.0
DEFAULT_SECONDS = 600.0
MIN_SECONDS = 1.0  # a bad document never makes the job save at every step


class IntervalFollower:
    def __init__(self, store: Any, job_id: str | None, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        self.store = store
        self.job_id = job_id
        self.seconds = DEFAULT_SECONDS
        try:
            first = float(env.get(contract.ENV_CHECKPOINT_INTERVAL, "") or "nan")
        except ValueError:
            first = float("nan")
        if first == first and first > 0:  # not NaN
            self.seconds = max(first, MIN_SECONDS)
        self._read_at = float("-inf")

    def current(self, now: float | None = None) -> float:
        """The interval to follow now (seconds), re-reading the store's document when due."""
        now = time.monotonic() if now is None else now
        if now - self._read_at >= READ_EVERY:
            self._read_at = now
            self._read()
        return self.seconds

    def _read(self) -> None:
        try:
            doc = contract.parse_json(self.store.read_text(contract.CHECKPOINT_INTERVAL))
        except Exception as e:  # a store hiccup keeps the interval it had
            log.debug("%s: %s", contract.CHECKPOINT_INTERVAL, e)
            return
        if not doc or (self.job_id and doc.get("job_id") not in (None, self.job_id)):
            return
        value = doc.get("seconds")
        if isinstance(value, int | float) and value > 0:
            new = max(float(value), MIN_SECONDS)
            if new != self.seconds:
                log.info(
                    "checkpoint interval %.0fs (was %.0fs), from the daemon", new, self.seconds
                )
            self.seconds = new
