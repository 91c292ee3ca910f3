"""The progress contract the scheduler reads: ``progress.json`` and ``DONE`` in the store.

Both name the job and attempt that wrote them, and both are written only while this attempt
owns the store (the fence is read before each write): the daemon ignores files another job
wrote, and a stale attempt never overwrites the owner's progress."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from trainer.contract import DONE, ENV_ATTEMPT, ENV_JOB_ID, PROGRESS, done_doc, my_attempt, utc_now
from trainer.fence import Fence
from trainer.storage import Store

__all__ = ["DONE", "PROGRESS", "Progress", "utc_now"]


class Progress:
    """Rank 0's view of the run, written atomically; other ranks hold a no-op instance."""

    def __init__(
        self,
        store: Store,
        enabled: bool,
        total_steps: int,
        world_size: int,
        interval_seconds: float,
        fence: Fence | None = None,
    ) -> None:
        self.store = store
        self.fence = fence
        self.enabled = enabled
        self.interval = interval_seconds
        self._lock = threading.Lock()
        self._last_write = 0.0
        self.doc: dict[str, Any] = {
            "step": 0,
            "total_steps": total_steps,
            "samples": 0,
            "updated_at": utc_now(),
            "last_checkpoint_step": None,
            "state": "running",
            "world_size": world_size,
            "loss": None,
            "job_id": os.environ.get(ENV_JOB_ID),
            "attempt": os.environ.get(ENV_ATTEMPT),
        }

    def update(self, force: bool = False, **fields: Any) -> None:
        """Record fields; write when forced or when the refresh interval has passed."""
        if not self.enabled or (self.fence is not None and self.fence.tripped):
            return
        with self._lock:
            self.doc.update(fields)
            now = time.monotonic()
            if force or now - self._last_write >= self.interval:
                if self.fence is not None and self.fence.check():
                    return  # another owner holds the store: its progress is not ours to write
                self.doc["updated_at"] = utc_now()
                self.store.write_text(PROGRESS, json.dumps(self.doc, indent=1) + "\n")
                self._last_write = now

    def checkpointed(self, step: int) -> None:
        """Called (possibly from the async-save thread) once ``step-<N>`` is durable."""
        self.update(force=True, last_checkpoint_step=step)

    def done(self) -> None:
        if not self.enabled or (self.fence is not None and self.fence.check()):
            return
        self.update(force=True, state="done")
        job = self.doc.get("job_id")
        self.store.write_text(DONE, done_doc(int(self.doc["step"]), job, my_attempt()))
