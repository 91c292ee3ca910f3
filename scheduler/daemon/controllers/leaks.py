"""Leak collection: tagged resources with no live attempt are terminated after a grace.

When a resource was first seen without an owner is kept in the database (LeakSeen), so a
restart neither resets the grace (leaks live longer) nor, worse, forgets that a resource was
already waiting. A live gang owns every node it recorded; a node it never recorded (a
half-gang left by a crash) is a leak like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import select

from providers.base import TAG_ATTEMPT, TAG_JOB, ResourceKind, TaggedResource
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.daemon.controllers.base import LIVE, Clouds, Db, listing, safe_message, terminating
from scheduler.daemon.controllers.gang import nodes_of
from scheduler.daemon.controllers.rows import table_of
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, LeakSeen

SWEEP_EVERY = timedelta(minutes=1)


def sweep_interval(cfg: Config) -> timedelta:
    """How often the clouds are listed for leaks: a minute, or a quarter of a shorter grace
    (a leak then lives at most grace x 1.25, plus one reconcile interval)."""
    return min(SWEEP_EVERY, cfg.daemon.leak_grace / 4)


class LeakController:
    def __init__(
        self, db: Db, clock: Clock, clouds: Callable[[], Clouds], config: Callable[[], Config]
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self._config = config
        self._swept_at: datetime | None = None  # in memory: a restarted daemon sweeps at once

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
        listed = clouds.gather(
            {n: (n, listing(clouds.providers[n].capabilities.label(owner))) for n in clouds}
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
        for name, r in listed.items():
            if r.error is not None:
                with self.db.write() as s:
                    emit(s, now, "list_failed", f"{name}: {safe_message(r.error)}", level="warning")
                continue
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
        due: dict[str, tuple[str, TaggedResource]] = {}
        with self.db.write() as s:
            failed = {name for name, r in listed.items() if r.error is not None}
            for rid, row in seen.items():
                if rid not in orphans and row.provider not in failed:
                    s.delete(row)  # adopted, ended or gone (a failed listing proves nothing)
            for rid, (name, res) in orphans.items():
                known = seen.get(rid)
                if known is None:
                    s.add(
                        LeakSeen(
                            resource_id=rid,
                            provider=name,
                            kind=res.ref.kind.value,
                            first_seen_at=now,
                        )
                    )
                elif now - known.first_seen_at >= cfg.daemon.leak_grace:
                    due[rid] = (name, res)
        if not due:
            return
        results = clouds.gather(
            {rid: (name, terminating([res.ref])) for rid, (name, res) in due.items()}
        )
        with self.db.write() as s:
            for rid, done_r in results.items():
                name, res = due[rid]
                if done_r.error is not None:
                    emit(
                        s,
                        now,
                        "terminate_failed",
                        f"{rid}: {safe_message(done_r.error)}",
                        level="warning",
                    )
                    continue
                done = s.get(LeakSeen, rid)
                if done is not None:
                    s.delete(done)
                emit(
                    s,
                    now,
                    "leak_terminated",
                    f"{res.ref.kind.value} {rid} carried our tags but no live attempt "
                    f"({res.tags.get(TAG_ATTEMPT) or 'untagged'})",
                    job_id=res.tags.get(TAG_JOB),
                    level="warning",
                )
