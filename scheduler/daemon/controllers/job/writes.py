"""What a pass decided, and its write: launch intents, waiting reasons, holds, running jobs.

The per-job steps decide in memory and leave their decisions here (`PassWrites`); every
WRITE_BATCH jobs they are written in one transaction that re-reads the rows it changes and
writes only what still holds. A placement becomes an Attempt row (the intent, LAUNCHING
with its deterministic token), which the LaunchController turns into a cloud call: there
is no cloud I/O here. Intents, their jobs' new state and their events go in as one statement
each. A batch that fails is written again job by job, so one bad job is backed off (and
eventually quarantined) alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from providers.base import Offering
from scheduler.core.config import Config
from scheduler.core.states import AttemptState, JobState
from scheduler.daemon.controllers.base import CatalogHolder, Db, safe_message
from scheduler.daemon.controllers.job.snapshot import PassFacts
from scheduler.daemon.controllers.rows import chunks as id_chunks
from scheduler.daemon.controllers.rows import live_attempt_ids, load_by_id, table_of
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.state.audit import emit_many, event
from scheduler.state.models import Attempt, Job

log = logging.getLogger("spotwise.reconcile")


@dataclass(frozen=True, slots=True)
class Intent:
    """A placement to write as the job's next attempt."""

    job_id: str
    offering: Offering
    at: datetime
    nodes: int = 1  # instances to launch (fewer than asked: an elastic gang shrank)
    note: str = ""  # why it is not the plain choice (a gang shrank, on-demand after fallback)
    checkpoint_interval_s: float | None = None  # "auto" checkpointing: the first interval
    # Placed beside this live attempt of the job, which has a notice: the new attempt's store
    # claim waits until that one has ended (or its notice window has passed).
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class LiveUpdate:
    """A job with a live attempt whose row the pass changes (running.RunningJobs.apply)."""

    job_id: str
    attempt_id: str
    progress: dict[str, Any] | None
    at: datetime


@dataclass(frozen=True, slots=True)
class Hold:
    """A waiting job that a hard budget cannot pay from what is left of it: held under it."""

    job_id: str
    budget: str
    reason: str
    at: datetime
    spent: float | None = None  # what the budget had spent (a refund below it releases)


@dataclass
class PassWrites:
    """What a pass has decided but not yet written, flushed every WRITE_BATCH jobs."""

    intents: list[Intent] = field(default_factory=list)
    explains: list[tuple[str, str, datetime]] = field(default_factory=list)
    live: list[LiveUpdate] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.intents) + len(self.explains) + len(self.live) + len(self.holds)

    def one_by_one(self) -> Iterable[tuple[str, PassWrites]]:
        for i in self.intents:
            yield i.job_id, PassWrites(intents=[i])
        for x in self.explains:
            yield x[0], PassWrites(explains=[x])
        for u in self.live:
            yield u.job_id, PassWrites(live=[u])
        for h in self.holds:
            yield h.job_id, PassWrites(holds=[h])

    def explain(self, job: Job, reason: str, now: datetime) -> None:
        """Record why a job waits (once per distinct reason, not every pass)."""
        if job.reason != reason:
            self.explains.append((job.id, reason, now))


# What the write hands to the other phases, inside its transaction.
ApplyLive = Callable[[Session, Job | None, Attempt | None, LiveUpdate, PassFacts], None]
WriteHolds = Callable[[Session, list[Hold], dict[str, Job], list[dict[str, Any]]], None]
StepFailed = Callable[[str, Exception], None]


class DecisionWriter:
    """Writes a pass's decisions in batches; the running jobs' updates and the holds are
    written by their own phases (`apply_live`, `write_holds`) inside the same transaction,
    and a job whose write fails alone goes to `step_failed` (back-off, quarantine)."""

    def __init__(
        self,
        db: Db,
        catalog: CatalogHolder,
        config: Callable[[], Config],
        apply_live: ApplyLive,
        write_holds: WriteHolds,
        step_failed: StepFailed,
    ) -> None:
        self.db = db
        self.catalog = catalog
        self._config = config
        self._apply_live = apply_live
        self._write_holds = write_holds
        self._step_failed = step_failed

    def flush(self, writes: PassWrites, facts: PassFacts) -> list[str]:
        """Write a batch in one transaction; if that fails, job by job, so one bad job is
        backed off (and eventually quarantined) alone. Returns the new attempts' ids."""
        if not len(writes):
            return []
        try:
            return self._write(writes, facts)
        except CrashForTest:
            raise
        except Exception as e:  # each job's own failure is logged in full below
            log.warning(
                "a batch of %d job writes failed (%s); writing them one by one",
                len(writes),
                safe_message(e),
            )
        made: list[str] = []
        for job_id, one in writes.one_by_one():
            try:
                made.extend(self._write(one, facts))
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job_id)
                self._step_failed(job_id, e)
        return made

    def _write(self, writes: PassWrites, facts: PassFacts) -> list[str]:
        """One transaction: re-read the batch's jobs (and live attempts), then write what
        still holds. Intents, their jobs' new state and their events go in as one statement
        each (core: an ORM object per row costs more than the rest of the pass)."""
        made: list[dict[str, Any]] = []
        launching: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        with self.db.write() as s:
            others = [j for j, _, _ in writes.explains] + [u.job_id for u in writes.live]
            others += [h.job_id for h in writes.holds]
            jobs = load_by_id(s, Job, others)
            attempts = load_by_id(s, Attempt, [u.attempt_id for u in writes.live])
            if writes.intents:
                want = [i.job_id for i in writes.intents]
                heads = _job_heads(s, want)
                busy = live_attempt_ids(s, want)
                for it in writes.intents:
                    head = heads.get(it.job_id)
                    if head is None:
                        continue
                    if it.replaces is None:
                        if head.state not in (JobState.PENDING, JobState.RECOVERING):
                            continue
                        if head.id in busy:
                            continue  # never two live attempts for one job, but on a notice
                    elif head.state is not JobState.RUNNING or busy.get(head.id) != {it.replaces}:
                        continue  # the noticed attempt ended, or one was placed beside it
                    row, job_values = self._intent_row(head, it)
                    made.append(row)
                    launching.append(job_values)
                    events.append(
                        event(
                            it.at,
                            "launching",
                            job_values["reason"],
                            job_id=head.id,
                            attempt_id=row["id"],
                        )
                    )
            for job_id, reason, at in writes.explains:
                fresh = jobs.get(job_id)
                if fresh is not None and fresh.reason != reason:
                    fresh.reason, fresh.updated_at = reason, at
                    s.add(fresh)
                    events.append(event(at, "waiting", reason, job_id=job_id))
            if writes.holds:
                self._write_holds(s, writes.holds, jobs, events)
            if made:
                jt = table_of(Job)
                s.execute(
                    sa.update(jt)
                    .where(jt.c.id == sa.bindparam("b_id"))
                    .values(
                        attempts=sa.bindparam("attempts"),
                        state=JobState.LAUNCHING,
                        reason=sa.bindparam("reason"),
                        updated_at=sa.bindparam("updated_at"),
                    ),
                    launching,
                )
                s.execute(sa.insert(table_of(Attempt)), made)
            emit_many(s, events)
            for u in writes.live:
                self._apply_live(s, jobs.get(u.job_id), attempts.get(u.attempt_id), u, facts)
        return [row["id"] for row in made]

    def _intent_row(self, job: Any, it: Intent) -> tuple[dict[str, Any], dict[str, Any]]:
        """The next Attempt of `job` (its id, state and attempt count, as re-read in the
        write) on the intent's offering, LAUNCHING with its deterministic token; and the
        job's new values (LAUNCHING, why), written in the same transaction."""
        o, now = it.offering, it.at
        number = job.attempts + 1
        attempt_id = f"{job.id}-a{number}"
        gang = f"{it.nodes} x " if it.nodes > 1 else ""
        reason = f"launching {gang}on {o.pool} at ${o.price_per_hour:.2f}/h"
        if it.note:
            reason += f" ({it.note})"
        if it.replaces is not None:
            reason += f", beside {it.replaces} (noticed; the store is handed over once it saved)"
        attempt = {
            "id": attempt_id,
            "job_id": job.id,
            "number": number,
            "token": f"{self._config().daemon.owner}-{attempt_id}",
            "provider": self.catalog.provider_of_pool.get(o.pool, o.cloud),
            "cloud": o.cloud,
            "region": o.region,
            "zone": o.zone,
            "instance_type": o.instance_type,
            "market": o.market.value,
            "pool": o.pool,
            "price_per_hour": o.price_per_hour,
            "billed_price": o.price_per_hour,
            "checkpoint_interval_s": it.checkpoint_interval_s,
            "replaces": it.replaces,
            "claim_pending": it.replaces is not None,
            "gpu_count": o.gpu_count,
            "nodes": it.nodes,
            "state": AttemptState.LAUNCHING,
            "created_at": now,
        }
        return attempt, {"b_id": job.id, "attempts": number, "reason": reason, "updated_at": now}


def _job_heads(s: Session, job_ids: list[str]) -> dict[str, Any]:
    """id, state and attempt count of these jobs (core rows, no ORM object), by id."""
    jt = table_of(Job)
    out: dict[str, Any] = {}
    for chunk in id_chunks(job_ids):
        q = sa.select(jt.c.id, jt.c.state, jt.c.attempts).where(jt.c.id.in_(chunk))
        out.update((r.id, r) for r in s.execute(q))
    return out
