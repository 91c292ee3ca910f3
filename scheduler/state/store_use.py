"""One checkpoint store, one job at a time: who else uses a store, asked at submit and again
before the store is claimed for a launch.

Two jobs naming one store would finish, fence and prune each other (one job's `DONE` read as
the other's, each deleting the other's steps). So a store that an unfinished job uses is
refused; a store a finished job left is refused too unless the new job asks to continue from
its checkpoints (`reuse_checkpoint = true` in the job file). Submit checks before the job is
queued; the launch pass checks again before the claim, so two submits that raced past each
other (or a FAILED job requeued after another took its store) still never share a store.
Between two unfinished jobs the store stays with the one that claimed it last: the newest
launch sent (`launch_requested_at`), else the newest submission.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session

from scheduler.core.states import JobState
from scheduler.state.models import Attempt, Job
from trainer.contract import canonical_uri


@dataclass(frozen=True, slots=True)
class StoreUser:
    """A job that names a store."""

    id: str
    name: str
    state: JobState
    created_at: datetime
    checkpoint_uri: str


def spellings(uri: str) -> list[str]:
    """The forms of one store a job row may hold (rows written before URIs were stored in
    one spelling keep what the user wrote)."""
    canon = canonical_uri(uri)
    out = {uri, uri.rstrip("/"), uri.rstrip("/") + "/", canon, canon + "/"}
    if canon.startswith("file://"):
        from trainer.contract import parse_uri

        path = str(parse_uri(canon).path)
        out |= {path, path + "/"}
    return sorted(out)


def users(s: Session, uris: Iterable[str]) -> dict[str, list[StoreUser]]:
    """Every job naming each store (by its canonical URI), oldest first."""
    wanted: dict[str, str] = {}
    for uri in uris:
        for form in spellings(uri):
            wanted[form] = canonical_uri(uri)
    if not wanted:
        return {}
    t = Job.__table__  # type: ignore[attr-defined]
    out: dict[str, list[StoreUser]] = {}
    forms = list(wanted)
    for i in range(0, len(forms), 500):
        q = sa.select(t.c.id, t.c.name, t.c.state, t.c.created_at, t.c.checkpoint_uri).where(
            t.c.checkpoint_uri.in_(forms[i : i + 500])
        )
        for r in s.execute(q):
            key = wanted[r.checkpoint_uri]
            out.setdefault(key, []).append(
                StoreUser(r.id, r.name, JobState(r.state), r.created_at, r.checkpoint_uri)
            )
    for found in out.values():
        found.sort(key=lambda u: (u.created_at, u.id))
    return out


def refusal(
    uri: str,
    job_id: str | None,
    reuse: bool,
    found: Sequence[StoreUser],
    claimed: dict[str, datetime] | None = None,
) -> str | None:
    """Why a job may not use `uri`, given the other jobs that name it; None when it may.
    `job_id` None: a job being submitted (any unfinished job found holds the store).
    `claimed`: job id -> its newest launch sent; the newest claim holds the store."""
    claimed = claimed or {}

    def claim(u: StoreUser) -> tuple[datetime, str]:
        return (max(claimed.get(u.id, u.created_at), u.created_at), u.id)

    me = next((u for u in found if u.id == job_id), None)
    for other in found:
        if other.id == job_id:
            continue
        if not other.state.terminal:
            if me is not None and claim(me) > claim(other):
                continue  # this job holds the store: the other one yields
            return (
                f"checkpoint {uri} is in use by job {other.id} ({other.name}, "
                f"{other.state.value}); give this job its own `checkpoint`, or cancel that job"
            )
        if not reuse:
            return (
                f"checkpoint {uri} holds the checkpoints of job {other.id} ({other.name}, "
                f"{other.state.value}); set `reuse_checkpoint = true` to continue from them, "
                f"or give this job its own `checkpoint`"
            )
    return None


def reuse_of(spec_json: str) -> bool:
    """The job file's `reuse_checkpoint`, read from the stored spec without validating it."""
    try:
        return bool(json.loads(spec_json).get("reuse_checkpoint", False))
    except (ValueError, AttributeError):
        return False


def launch_refusals(s: Session, jobs: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """For (job id, checkpoint URI, spec JSON) about to be launched: job id -> why it may
    not use its store now. One query for the whole batch."""
    found = users(s, (uri for _, uri, _ in jobs))
    shared = {
        job_id: found[canonical_uri(uri)]
        for job_id, uri, _ in jobs
        if any(u.id != job_id for u in found.get(canonical_uri(uri), []))
    }
    if not shared:
        return {}
    ids = {u.id for others in shared.values() for u in others}
    a = Attempt.__table__  # type: ignore[attr-defined]
    q = (
        sa.select(a.c.job_id, sa.func.max(a.c.launch_requested_at))
        .where(a.c.job_id.in_(sorted(ids)), a.c.launch_requested_at.is_not(None))
        .group_by(a.c.job_id)
    )
    claimed = {job: when for job, when in s.execute(q) if when is not None}
    out: dict[str, str] = {}
    for job_id, uri, spec_json in jobs:
        if job_id not in shared:
            continue
        why = refusal(uri, job_id, reuse_of(spec_json), shared[job_id], claimed)
        if why is not None:
            out[job_id] = why
    return out
