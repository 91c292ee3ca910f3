"""Leak collection: resources provably ours with no live attempt are terminated after a grace.

Every resource the daemon creates carries the owner tag and this database's install id. A
listed resource is ours only when it carries our install id and names a job of this
database (or, made before install ids, names an attempt of this database): two deployments
with the same owner in one account, or a resource made by hand with our owner tag, are
reported once (`leak_not_ours`) and never terminated. A leak of ours is terminated after
`leak_grace` and what it ran is billed to the attempt its tags name (so to its job and its
budgets), unless that attempt already billed that instance.

When a resource was first seen without a live attempt is kept in the database (LeakSeen), so
a restart neither resets the grace (leaks live longer) nor, worse, forgets that a resource
was already waiting. A live gang owns every node it recorded; a node it never recorded (a
half-gang left by a crash) is a leak like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session, select

from providers.base import (
    TAG_ATTEMPT,
    TAG_INSTALL,
    TAG_JOB,
    Capabilities,
    ResourceKind,
    TaggedResource,
)
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.daemon.controllers.base import (
    LIVE,
    Clouds,
    Db,
    SaidOnce,
    listing,
    safe_message,
    terminating,
)
from scheduler.daemon.controllers.gang import nodes_of
from scheduler.daemon.controllers.rows import chunks, table_of
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, AttemptInstance, Job, LeakSeen

SWEEP_EVERY = timedelta(minutes=1)
# Bills a terminated leak of ours to the attempt its tags name: (session, attempt id, the
# instance's launch, its end). SpendController.bill_leaked.
BillLeaked = Callable[[Session, str, datetime, datetime], float]


def sweep_interval(cfg: Config) -> timedelta:
    """How often the clouds are listed for leaks: a minute, or a quarter of a shorter grace
    (a leak then lives at most grace x 1.25, plus one reconcile interval)."""
    return min(SWEEP_EVERY, cfg.daemon.leak_grace / 4)


class LeakController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        config: Callable[[], Config],
        install_id: str = "",
        bill_leaked: BillLeaked | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self._config = config
        self.install_id = install_id
        self._bill_leaked = bill_leaked
        self._swept_at: datetime | None = None  # in memory: a restarted daemon sweeps at once
        self.said = SaidOnce()  # list_failed and terminate_failed, once per reason

    def collect(self) -> None:
        """Sweep at most every `sweep_interval`: a leak is only terminated after the grace,
        so listing every resource of every cloud on every pass (each one a cloud API call,
        and a read of every live attempt) buys nothing but CPU and API quota."""
        cfg = self._config()
        now = self.clock.now()
        if self._swept_at is not None and now - self._swept_at < sweep_interval(cfg):
            return
        clouds = self._clouds()
        owner = cfg.daemon.owner
        # A provider that places nothing new (enabled = false) is listed only while some
        # attempt still runs there: one disabled for good is not called at all.
        names = [n for n in clouds if n not in clouds.observe_only]
        if clouds.observe_only:
            with self.db.read() as s:
                busy = set(
                    s.execute(
                        sa.select(table_of(Attempt).c.provider)
                        .where(table_of(Attempt).c.state.in_(LIVE))
                        .distinct()
                    ).scalars()
                )
            names += [n for n in clouds if n in clouds.observe_only and n in busy]
        listed = clouds.gather(
            {n: (n, listing(clouds.providers[n].capabilities.label(owner))) for n in names}
        )
        self._swept_at = now
        now = self.clock.now()
        t = table_of(Attempt)
        with self.db.read() as s:
            # Core rows: four columns of every live attempt, not an ORM object each.
            attempts = s.execute(
                sa.select(t.c.id, t.c.nodes, t.c.instance_id, t.c.provider).where(
                    t.c.state.in_(LIVE)
                )
            ).all()
            gangs = nodes_of(s, [a.id for a in attempts if a.nodes > 1])
            live: dict[str, tuple[set[str], str]] = {}
            for a in attempts:
                ids = {r.instance_id for r in gangs.get(a.id, []) if r.instance_id}
                if a.instance_id:
                    ids.add(a.instance_id)
                live[a.id] = (ids, a.provider)
            seen = {r.resource_id: r for r in s.exec(select(LeakSeen)).all()}
        orphans: dict[str, tuple[str, TaggedResource]] = {}
        failed_lists: list[tuple[str, str]] = []
        for name, r in listed.items():
            if r.error is not None:
                msg = f"{name}: {safe_message(r.error)}"
                if self.said.first(f"list:{name}", msg):
                    failed_lists.append((name, msg))
                continue
            self.said.forget(f"list:{name}")
            caps = clouds.providers[name].capabilities
            live_labels = {caps.label(k): v for k, v in live.items()}
            for res in r.value or []:
                if not res.live:
                    continue
                owned = live_labels.get(res.tags.get(TAG_ATTEMPT, ""))
                if (
                    owned is not None
                    and owned[1] == name
                    and (
                        res.ref.kind is not ResourceKind.INSTANCE
                        or not owned[0]
                        or res.ref.id in owned[0]
                    )
                ):
                    continue
                orphans[res.ref.id] = (name, res)
        if failed_lists:
            with self.db.write() as s:
                for _, msg in failed_lists:
                    emit(s, now, "list_failed", msg, level="warning")
        with self.db.read() as s:
            proof = _Proof.read(s, [res for _, res in orphans.values()])
        due: dict[str, tuple[str, TaggedResource]] = {}
        with self.db.write() as s:
            failed = {name for name, r in listed.items() if r.error is not None}
            for rid, row in seen.items():
                if rid not in orphans and row.provider not in failed:
                    s.delete(row)  # adopted, ended or gone (a failed listing proves nothing)
            for rid, (name, res) in orphans.items():
                caps = clouds.providers[name].capabilities
                why = proof.not_ours(res, caps, self.install_id)
                known = seen.get(rid)
                if known is None:
                    known = LeakSeen(
                        resource_id=rid,
                        provider=name,
                        kind=res.ref.kind.value,
                        first_seen_at=now,
                        not_ours=why,
                    )
                    s.add(known)
                    if why:
                        _report(s, now, res, why, owner)
                    continue
                if why:
                    if known.not_ours != why:
                        known.not_ours = why
                        s.add(known)
                        _report(s, now, res, why, owner)
                    continue
                if known.not_ours:  # proven ours since (its job was unknown then)
                    known.not_ours = ""
                    s.add(known)
                if now - known.first_seen_at >= cfg.daemon.leak_grace:
                    due[rid] = (name, res)
        if not due:
            return
        results = clouds.gather(
            {rid: (name, terminating([res.ref])) for rid, (name, res) in due.items()}
        )
        now = self.clock.now()
        with self.db.write() as s:
            for rid, done_r in results.items():
                name, res = due[rid]
                if done_r.error is not None:
                    msg = f"{rid}: {safe_message(done_r.error)}"
                    if self.said.first(f"terminate:{rid}", msg):
                        emit(s, now, "terminate_failed", msg, level="warning")
                    continue
                self.said.forget(f"terminate:{rid}")
                done = s.get(LeakSeen, rid)
                first_seen = done.first_seen_at if done is not None else now
                if done is not None:
                    s.delete(done)
                billed = self._bill(s, res, first_seen, now)
                emit(
                    s,
                    now,
                    "leak_terminated",
                    f"{res.ref.kind.value} {rid} carried our tags but no live attempt "
                    f"({res.tags.get(TAG_ATTEMPT) or 'untagged'})" + billed,
                    job_id=res.tags.get(TAG_JOB),
                    level="warning",
                )

    def _bill(self, s: Session, res: TaggedResource, first_seen: datetime, now: datetime) -> str:
        """A terminated instance of ours is billed to the attempt its tags name, from its
        launch (else from when it was first seen) to now, unless that attempt recorded this
        instance (then it was billed to its recorded end). Returns the event's note."""
        if res.ref.kind is not ResourceKind.INSTANCE or self._bill_leaked is None:
            return ""
        a = s.get(Attempt, res.tags.get(TAG_ATTEMPT, ""))
        if a is None:
            return ""
        recorded = {a.instance_id} | set(
            s.exec(
                select(AttemptInstance.instance_id).where(AttemptInstance.attempt_id == a.id)
            ).all()
        )
        if res.ref.id in recorded:
            return ""
        start = min(res.created_at or first_seen, first_seen, now)
        usd = self._bill_leaked(s, a.id, start, now)
        return f"; billed ${usd:.2f} to {a.id}" if usd else ""


class _Proof:
    """What this database knows of the jobs and attempts that listed resources name."""

    def __init__(self, jobs: set[str], attempts: dict[str, str]) -> None:
        self.jobs = jobs
        self.attempts = attempts  # attempt id -> its job's id

    @classmethod
    def read(cls, s: Session, resources: list[TaggedResource]) -> _Proof:
        job_tags = {r.tags[TAG_JOB] for r in resources if r.tags.get(TAG_JOB)}
        attempt_tags = {r.tags[TAG_ATTEMPT] for r in resources if r.tags.get(TAG_ATTEMPT)}
        jobs: set[str] = set()
        attempts: dict[str, str] = {}
        jt, at = table_of(Job), table_of(Attempt)
        for chunk in chunks(sorted(job_tags)):
            jobs.update(s.execute(sa.select(jt.c.id).where(jt.c.id.in_(chunk))).scalars())
        for chunk in chunks(sorted(attempt_tags)):
            for aid, job_id in s.execute(
                sa.select(at.c.id, at.c.job_id).where(at.c.id.in_(chunk))
            ).all():
                attempts[aid] = job_id
        return cls(jobs, attempts)

    def not_ours(self, res: TaggedResource, caps: Capabilities, install_id: str) -> str:
        """ "" when the resource is provably this database's, else why not (in words)."""
        tags = res.tags
        job = tags.get(TAG_JOB, "")
        install = tags.get(TAG_INSTALL)
        if install is not None:
            if not install_id or install != caps.label(install_id):
                return f"it belongs to another installation ({install})"
            if job not in self.jobs:
                return f"its job {job or '(none)'} is unknown to this database"
            return ""
        # Made before install ids were tagged: ours only if it names one of our attempts.
        attempt = tags.get(TAG_ATTEMPT, "")
        owner_job = self.attempts.get(attempt)
        if owner_job is None or (job and job != owner_job):
            return (
                f"it carries no install id and its attempt {attempt or '(none)'} is unknown "
                "to this database"
            )
        return ""


def _report(s: Session, now: datetime, res: TaggedResource, why: str, owner: str) -> None:
    emit(
        s,
        now,
        "leak_not_ours",
        f"{res.ref.kind.value} {res.ref.id} carries the owner tag '{owner}' but {why}: "
        "left alone (another deployment, or made by hand)",
        job_id=None,
        level="warning",
    )
