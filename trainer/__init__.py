"""spotwise bundled trainer: runs on the (spot) instance, survives preemption.

It talks to the scheduler only through the checkpoint store (``progress.json``, ``DONE``,
``latest``, ``step-<N>/``) and environment variables; it imports nothing from ``scheduler`` or
``providers`` so it can run on a bare GPU box.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the real imports are lazy (module __getattr__): the scheduler pays nothing
    from trainer.preemptible import Preemptible
    from trainer.preemption import ignore_stop_signals

# The exit codes the scheduler reads are the contract's, defined once there (trainer/contract.py):
# EXIT_PREEMPTED (75) preempted, a durable checkpoint was written, start the same command again;
# EXIT_FENCED (76) a newer attempt owns the store (owner.json), this one stopped untouched;
# EXIT_UNCLAIMED (78) the store was never handed to this attempt within $SPOTWISE_CLAIM_WAIT.
from trainer.contract import EXIT_FENCED, EXIT_PREEMPTED, EXIT_UNCLAIMED

EXIT_OK = 0
"""Training finished (``DONE`` written) or was already finished."""
EXIT_FAILED = 1
"""Unexpected error (traceback printed)."""
EXIT_USAGE = 2
"""Bad configuration or command line (one clear message, no traceback)."""

__all__ = [
    "EXIT_FAILED",
    "EXIT_FENCED",
    "EXIT_OK",
    "EXIT_PREEMPTED",
    "EXIT_UNCLAIMED",
    "EXIT_USAGE",
    "Preemptible",
    "ignore_stop_signals",
]


def __getattr__(name: str) -> object:
    """``from trainer import Preemptible`` imports torch only then: the scheduler imports
    ``trainer.contract`` on hosts without torch."""
    if name == "Preemptible":
        from trainer.preemptible import Preemptible

        return Preemptible
    if name == "ignore_stop_signals":  # a DataLoader worker_init_fn for your own loop
        from trainer.preemption import ignore_stop_signals

        return ignore_stop_signals
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
