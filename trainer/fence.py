"""The owner fence: an attempt that lost the store to another job or a newer attempt must stop
writing to it.

The daemon records the job and attempt it launches in ``owner.json`` (``trainer.contract``)
and then rewrites ``latest`` unchanged, so its version moves. Two live attempts of one job (a
"dead" instance that was only partitioned, say), or two jobs given one store, would
otherwise race on ``latest`` and delete each other's steps. The trainer checks the fence at
start, before it deletes or writes a step, before every ``progress.json`` and ``DONE``
write, and writes ``latest`` only as a conditional write against the version it last saw
(``advance``): a stale attempt's write fails even when the owner moved between its check and
its write. Once tripped it never writes to the store again and exits ``EXIT_FENCED``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainer import contract
from trainer.config import ConfigError
from trainer.storage import Store

if TYPE_CHECKING:
    from trainer.distributed import DistInfo

log = logging.getLogger("trainer.fence")
# Conditional writes of `latest` retried after a conflict that was not a new owner (the
# daemon re-claiming for this very attempt after a restart, say).
ADVANCE_TRIES = 3


# How often a waiting attempt reads owner.json (one small read).
CLAIM_POLL_SECONDS = 0.2


def await_claim(
    store: Store,
    attempt: int | None,
    job_id: str | None,
    seconds: float | None,
    stop: Callable[[], bool] = lambda: False,
    poll: float = CLAIM_POLL_SECONDS,
) -> str:
    """Wait until ``owner.json`` names this attempt (or a newer one), at most `seconds`.

    An attempt placed while the previous one still writes its final checkpoint is launched
    before the daemon hands it the store: it must read and write nothing there until then,
    or it would resume from a checkpoint older than the one being saved. Returns "owned"
    (go on: resume from ``latest``), "fenced" (a newer attempt or another job owns it),
    "stopped" (`stop()` said so: a SIGTERM while waiting) or "timeout"."""
    if seconds is None or attempt is None:
        return "owned"
    deadline = time.monotonic() + seconds
    said = False
    while True:
        text = store.read_text(contract.OWNER)
        owner = contract.owner_attempt(text)
        if contract.fenced(text, attempt, job_id):
            return "fenced"
        # Not implied by `not fenced`: for job_id "" `fenced` sees no job, `ours` another one.
        if owner == attempt and contract.ours(text, job_id):
            if said:
                log.info("owner.json names attempt %d: resuming from latest", attempt)
            return "owned"
        if stop():
            return "stopped"
        if time.monotonic() >= deadline:
            return "timeout"
        if not said:
            log.info(
                "waiting up to %.0fs for owner.json to name attempt %d (now %s): the previous "
                "attempt is still saving",
                seconds,
                attempt,
                owner,
            )
            said = True
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


class Fence:
    """Reads ``owner.json`` on demand; ``tripped`` sticks once another owner was seen."""

    def __init__(self, store: Store, attempt: int | None = None, job_id: str | None = None) -> None:
        self.store = store
        self.attempt = contract.my_attempt() if attempt is None else attempt
        self.job_id = contract.my_job() if job_id is None else job_id
        self.owner: int | None = None
        self.owner_job: str | None = None
        self.tripped = False
        self._latest_version: str | None = None
        self._latest_seen = False

    @property
    def active(self) -> bool:
        """Under the scheduler (an attempt number): outside it nothing is fenced."""
        return self.attempt is not None

    def check(self) -> bool:
        """True when another job or a newer attempt owns the store (one read, then sticky)."""
        if self.tripped or not self.active:
            return self.tripped
        text = self.store.read_text(contract.OWNER)
        if contract.fenced(text, self.attempt, self.job_id):
            self._trip(text)
        elif not self._latest_seen:
            # The first check is at start, before any save: `latest` as this attempt found
            # it is what its first `advance` is conditional on. Read after owner.json, so a
            # claim that moved `latest` before this read has already moved the owner too.
            self.observe_latest()
        return self.tripped

    def _trip(self, owner_text: str | None) -> None:
        """Stick at tripped, remembering the owner in `owner_text` (owner.json as read), and
        log the one ``fenced: ...`` line (``check``, and ``claim_exit`` on a newer owner)."""
        self.tripped = True
        self.owner = contract.owner_attempt(owner_text)
        self.owner_job = contract.written_by(owner_text)
        log.error(self.message())

    def observe_latest(self) -> None:
        """Remember the version of ``latest`` now: this attempt's first ``advance`` is
        conditional on it (the first ``check`` calls this)."""
        _, self._latest_version = self.store.read_versioned(contract.LATEST)
        self._latest_seen = True

    def advance(self, text: str) -> bool:
        """Write ``latest`` unless fenced: False (and tripped) when another owner took the
        store. A conditional write, so a claim landing between the check and the write
        makes the write fail rather than succeed."""
        if not self.active:
            self.store.write_text(contract.LATEST, text)
            return True
        for _ in range(ADVANCE_TRIES):
            if self.check():
                return False
            version = self.store.write_if(contract.LATEST, text, self._latest_version)
            if version is not None:
                self._latest_version = version
                return True
            # `latest` moved under us: a new owner's claim (the check above trips) or a
            # re-claim of this same attempt (read the new version and write again).
            _, self._latest_version = self.store.read_versioned(contract.LATEST)
        if self.check():
            return False
        raise RuntimeError(
            f"{self.store.uri}/{contract.LATEST} kept changing under attempt {self.attempt} "
            f"though owner.json names it; not writing it"
        )

    def message(self) -> str:
        if self.owner_job and self.job_id and self.owner_job != self.job_id:
            whom = f"job {self.owner_job}, this is job {self.job_id}"
        else:
            whom = f"attempt {self.owner}, this is attempt {self.attempt}"
        return (
            f"fenced: {self.store.uri}/{contract.OWNER} names {whom}; leaving "
            f"latest/progress.json/DONE and the steps alone, exit {contract.EXIT_FENCED}"
        )


_CLAIM_OUTCOMES = ("owned", "fenced", "stopped", "timeout")


def claim_exit(fence: Fence, info: DistInfo, stop: Callable[[], bool]) -> int | None:
    """`await_claim` on rank 0 for ``$SPOTWISE_CLAIM_WAIT`` seconds, every rank agreeing:
    None to go on, else the exit code, the store untouched (the trainer and `Preemptible`
    both start this way). A set but bad ``$SPOTWISE_CLAIM_WAIT`` is a ConfigError (exit 2)."""
    from trainer import distributed

    try:  # every rank: a bad value is exit 2 everywhere, not rank 0 alone
        seconds = contract.claim_wait()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    outcome = "owned"
    if info.rank == 0:
        outcome = await_claim(fence.store, fence.attempt, fence.job_id, seconds, stop=stop)
        if outcome == "fenced":
            # The one `fenced: ...` line a tripped fence logs, the owner read again for its
            # names (not `check()`: it would also read `latest`, this attempt's no longer).
            fence._trip(fence.store.read_text(contract.OWNER))
    index = distributed.sum_across([float(_CLAIM_OUTCOMES.index(outcome))], info)[0]
    outcome = _CLAIM_OUTCOMES[int(index)]
    if outcome == "owned":
        return None
    if outcome == "fenced":
        return contract.EXIT_FENCED
    if outcome == "stopped":
        log.warning("SIGTERM while waiting for the store: exit %d", contract.EXIT_PREEMPTED)
        return contract.EXIT_PREEMPTED
    log.error(
        "owner.json never named attempt %s within %g s ($%s): leaving the store untouched, exit %d",
        fence.attempt,
        seconds,
        contract.ENV_CLAIM_WAIT,
        contract.EXIT_UNCLAIMED,
    )
    return contract.EXIT_UNCLAIMED
