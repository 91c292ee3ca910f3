"""Every hook the tests use to make a failure happen at an exact point, in one place.

The product runs with all of them off; each exists because a promise (no lost job, nothing
launched twice, an exact resume) can only be tested by dying at the worst moment:
- `Steps` names the points between two durable steps of a pass (intent written, cloud called,
  instance recorded, ...); `Reconciler(crash_hook=...)` raises `CrashForTest` at one of them,
  and the pass handles it as the process dying there (nothing after it runs).
- `spotwise status --count N` (hidden) stops `--watch -o json` after N documents, so a test
  reads a stream that ends.
- The trainer, which imports nothing from here, keeps its own in its `[debug]` settings
  (trainer/config.py: `sigterm_at_step`, `kill_in_save_at_step`).
"""

from __future__ import annotations

from collections.abc import Callable


class CrashForTest(RuntimeError):
    """Raised by a test's crash hook to simulate the daemon dying between two steps."""


class Steps:
    """Named points between two durable steps, where tests make the daemon 'crash'."""

    def __init__(self, hook: Callable[[str], None] | None = None) -> None:
        self.hook = hook

    def __call__(self, name: str) -> None:
        if self.hook is not None:
            self.hook(name)
