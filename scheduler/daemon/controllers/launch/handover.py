"""The store handed to an attempt placed beside a noticed one, once the old one is done.

An attempt placed on its predecessor's notice (`Attempt.replaces`, job/handover.py) is
launched at once but does not claim the checkpoint store (`claim_pending`): the old trainer
is still writing its final checkpoint, and a claim now would fence it out and lose that
save. Each pass, every pending claim whose predecessor has ended (its instance gone, or its
trainer's exit recorded), or whose predecessor's notice window (the cloud's notice length,
`Capabilities.notice_window`, plus `[daemon] handover_grace`) has passed, is written:
`owner.json` names the new attempt (store I/O, outside any transaction), then
`claim_pending` is cleared. Everything is read from the database, so a restart in between
claims again (the same owner: no change) and loses nothing. The new trainer waits at start
for `owner.json` to name it ($SPOTWISE_CLAIM_WAIT, bounded by `claim_wait`), then resumes
from `latest`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from providers.base import Capabilities
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.states import AttemptState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import LIVE, Clouds, Db, safe_message
from scheduler.daemon.controllers.rows import table_of
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job

log = logging.getLogger("spotwise.reconcile")

# What the new trainer waits beyond the predecessor's window: a few passes, the claim's write.
CLAIM_WAIT_MARGIN = timedelta(minutes=2)
# The notice window of a provider no longer configured: the default a cloud's capabilities have.
DEFAULT_NOTICE_WINDOW = Capabilities().notice_window


@dataclass(frozen=True, slots=True)
class Pending:
    """A claim not written yet: the new attempt, its job's store, and its predecessor."""

    attempt_id: str
    number: int
    job_id: str
    checkpoint_uri: str
    old_id: str | None
    old_number: int | None
    old_ended: bool
    old_notice_at: datetime | None
    old_provider: str | None
    created_at: datetime


def window(clouds: Clouds, provider: str | None, cfg: Config) -> timedelta:
    """How long after its notice an attempt may still be saving: its cloud's notice window
    plus `[daemon] handover_grace`."""
    p = clouds.get(provider) if provider else None
    notice = p.capabilities.notice_window if p is not None else DEFAULT_NOTICE_WINDOW
    return notice + cfg.daemon.handover_grace


def deadline(p: Pending, clouds: Clouds, cfg: Config) -> datetime:
    """When the claim is written even if the predecessor has not been seen to end."""
    start = p.old_notice_at or p.created_at
    return start + window(clouds, p.old_provider, cfg)


def claim_wait(p: Pending, clouds: Clouds, cfg: Config, now: datetime) -> float:
    """Seconds the new trainer waits for the claim ($SPOTWISE_CLAIM_WAIT): until the claim's
    deadline, plus a margin for the passes that write it."""
    left = max(timedelta(0), deadline(p, clouds, cfg) - now)
    return (left + CLAIM_WAIT_MARGIN).total_seconds()


def read_pending(db: Db, attempt_ids: list[str] | None = None) -> list[Pending]:
    """Live attempts whose claim waits (or these of them), with their predecessors."""
    t, jt = table_of(Attempt), table_of(Job)
    old = t.alias("old")
    q = (
        sa.select(
            t.c.id, t.c.number, t.c.job_id, jt.c.checkpoint_uri, t.c.created_at, old.c.id,
            old.c.state, old.c.notice_at, old.c.provider, old.c.number,
        )
        .join(jt, jt.c.id == t.c.job_id)
        .outerjoin(old, old.c.id == t.c.replaces)
        .where(t.c.claim_pending.is_(True), t.c.state.in_(list(LIVE)))
    )  # fmt: skip
    if attempt_ids is not None:
        q = q.where(t.c.id.in_(attempt_ids))
    with db.read() as s:
        rows = s.execute(q).all()
    return [
        Pending(
            r[0], r[1], r[2], r[3], r[5], r[9], r[5] is None or r[6] == AttemptState.ENDED.value,
            _utc(r[7]), r[8], r[4],
        )
        for r in rows
    ]  # fmt: skip


def _utc(value: object) -> datetime | None:
    """A column read through core: the model's UTC type already gives aware datetimes."""
    return value if isinstance(value, datetime) else None


class Handover:
    """Writes the deferred claims that are due (see the module's docstring)."""

    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        stores: CheckpointStores,
        config: Callable[[], Config],
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self.stores = stores
        self._config = config

    def _due(self, p: Pending, clouds: Clouds, cfg: Config, now: datetime) -> str:
        """Why the claim is due now, "" while the old attempt may still be saving."""
        if p.old_ended:
            return f"{p.old_id or 'the attempt it replaced'} has ended"
        if now >= deadline(p, clouds, cfg):
            return f"{p.old_id}'s notice window has passed"
        # The instance may outlive its trainer until the cloud reclaims it: the exit record
        # the instance's wrapper writes says the final save is behind it.
        if p.old_number is not None:
            code = self.stores.exit_code(p.checkpoint_uri, p.old_number, p.job_id)
            if code is not None:
                return f"{p.old_id}'s trainer exited ({code})"
        return ""

    def step(self) -> list[str]:
        """Claim the store for every due pending attempt; returns the ids handed the store."""
        pending = read_pending(self.db)
        if not pending:
            return []
        clouds, cfg, now = self._clouds(), self._config(), self.clock.now()
        claimed: list[tuple[Pending, str]] = []
        for p in pending:  # store I/O, outside every transaction
            try:
                why = self._due(p, clouds, cfg, now)
                if not why:
                    continue
                self.stores.claim(p.checkpoint_uri, p.number, p.attempt_id, p.job_id)
            except StoreError as e:
                log.warning("attempt %s: handing over the store failed: %s", p.attempt_id, e)
                continue
            except Exception as e:  # this attempt alone; the next pass tries again
                log.warning("attempt %s: handing over the store: %s", p.attempt_id, safe_message(e))
                continue
            claimed.append((p, why))
        if not claimed:
            return []
        done: list[str] = []
        with self.db.write() as s:
            for p, why in claimed:
                a = s.get(Attempt, p.attempt_id)
                if a is None or not a.claim_pending:
                    continue
                a.claim_pending = False
                s.add(a)
                emit(
                    s,
                    now,
                    "store_handed_over",
                    f"the checkpoint store now names attempt {p.number}: {why}",
                    job_id=p.job_id,
                    attempt_id=p.attempt_id,
                )
                done.append(p.attempt_id)
        return done
