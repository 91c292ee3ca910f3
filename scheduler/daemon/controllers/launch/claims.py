"""The fence before the cloud call: the attempt claims its job's checkpoint store.

`owner.json` in the store names the attempt about to launch, durably, before any cloud call
(a trainer of an older attempt that finds another owner stops writing checkpoints); then
`launch_requested_at` is committed, in the same transaction for the whole pass, on the
attempts still LAUNCHING and not asked to stop. Only then is the cloud called.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from scheduler.core.states import AttemptState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError, is_local
from scheduler.daemon.controllers.launch.request import JobView
from scheduler.daemon.controllers.rows import chunks, table_of
from scheduler.state.models import Attempt


def claim_stores(
    stores: CheckpointStores, ready: Sequence[tuple[Any, JobView, Any]]
) -> dict[str, Exception]:
    """Write owner.json for each attempt; errors by attempt. Remote stores (S3) are
    written concurrently; local files in this thread, where a handoff to a pool thread
    would cost more CPU than the write itself."""
    many = len(ready) > 1

    def one(item: tuple[Any, JobView, Any]) -> tuple[str, Exception | None]:
        a, job, _ = item
        try:
            # Many claims: each unsynced, then one sync below (an fsync costs as much
            # CPU as the rest of a launch).
            stores.claim(job.checkpoint_uri, a.number, a.id, job.id, sync=not many)
        except StoreError as e:
            return a.id, e
        return a.id, None

    results: list[tuple[str, Exception | None]] = []
    if not many:
        results = [one(x) for x in ready]
    else:
        # Each local claim right after its check: the store's URI cache then parses
        # each URI once, however many more jobs than its size the pass launches.
        remote: list[tuple[Any, JobView, Any]] = []
        local = False
        for x in ready:
            if is_local(x[1].checkpoint_uri):
                results.append(one(x))
                local = True
            else:
                remote.append(x)
        if remote:
            with ThreadPoolExecutor(max_workers=min(8, len(remote))) as pool:
                results.extend(pool.map(one, remote))
        if local:
            stores.sync_local()  # every fence is durable before any cloud call
    return {aid: e for aid, e in results if e is not None}


def stamp_launch_requested(s: Session, attempt_ids: list[str], now: datetime) -> set[str]:
    """Set launch_requested_at on those still LAUNCHING and not asked to stop (re-checked
    in this transaction); returns their ids. One UPDATE per chunk, not a load per row."""
    t = table_of(Attempt)
    ok = (t.c.state == AttemptState.LAUNCHING) & t.c.stop_requested_at.is_(None)
    out: set[str] = set()
    for chunk in chunks(attempt_ids):
        q = sa.update(t).where(t.c.id.in_(chunk), ok).values(launch_requested_at=now)
        if s.get_bind().dialect.update_returning:
            out.update(s.execute(q.returning(t.c.id)).scalars())
        else:  # no UPDATE ... RETURNING: read which qualify under the same lock, then write
            out.update(s.execute(sa.select(t.c.id).where(t.c.id.in_(chunk), ok)).scalars())
            s.execute(q)
    return out
