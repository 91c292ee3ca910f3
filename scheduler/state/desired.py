"""Writing desired state: submit and cancel. The daemon does the rest on its next pass."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from scheduler.core.errors import UserError, clean
from scheduler.core.jobspec import JobSpec
from scheduler.core.states import JobState
from scheduler.state import store_use
from scheduler.state.audit import emit
from scheduler.state.models import Job
from trainer.contract import canonical_uri

_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32: no i, l, o, u


def new_job_id() -> str:
    """'j-' + 12 base32 characters (60 bits): collisions are not a concern at millions of
    jobs (about 4e-5 at ten million), and the id still fits an 80-column status table."""
    return "j-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def submit(
    engine: Engine,
    spec: JobSpec,
    now: datetime,
    checkpoint_root: str,
    submitted_by: str = "",
    source: str = "<job>",
) -> Job:
    """Enqueue `spec` as a new PENDING job; `submitted_by` is the Unix user who asked. A
    `checkpoint` another unfinished job uses, or a finished job's without
    `reuse_checkpoint = true`, is refused (UserError, one line naming the other job)."""
    job_id = new_job_id()
    uri = canonical_uri(spec.checkpoint) if spec.checkpoint else None
    if uri is not None:
        with Session(engine) as s:
            found = store_use.users(s, [uri]).get(uri, [])
            why = store_use.refusal(uri, None, spec.reuse_checkpoint, found)
        if why is not None:
            raise UserError(f"{clean(source, 200)}: checkpoint: {why}")
    uri = uri or f"{checkpoint_root.rstrip('/')}/{job_id}"
    job = Job(
        id=job_id,
        name=spec.name,
        team=spec.team.strip().lower(),
        spec_json=spec.model_dump_json(),
        state=JobState.PENDING,
        reason="waiting for placement",
        checkpoint_uri=uri,
        created_at=now,
        updated_at=now,
        deadline=spec.deadline_at(now),
        submitted_by=submitted_by,
    )
    with Session(engine) as s:
        s.add(job)
        emit(
            s,
            now,
            "submitted",
            f"{spec.name} ({', '.join(spec.gpus)})",
            job_id=job_id,
            actor=submitted_by or None,
        )
        s.commit()
        s.refresh(job)
    return job


def resolve(session: Session, ref: str) -> Job:
    """A job by id, id prefix or unique name (the newest with that name)."""
    job = session.get(Job, ref)
    if job is not None:
        return job
    by_prefix = session.exec(select(Job).where(col(Job.id).startswith(ref))).all()
    if len(by_prefix) == 1:
        return by_prefix[0]
    by_name = session.exec(
        select(Job).where(Job.name == ref).order_by(col(Job.created_at).desc())
    ).first()
    if by_name is not None:
        return by_name
    raise UserError(f"no job {ref!r} (use an id from 'spotwise status')")


def cancel(engine: Engine, ref: str, now: datetime, actor: str | None = None) -> Job:
    with Session(engine) as s:
        job = resolve(s, ref)
        if job.state.terminal:
            raise UserError(f"job {job.id} is already {job.state.value}")
        job.cancel_requested = True
        job.updated_at = now
        s.add(job)
        emit(s, now, "cancel_requested", "cancel requested by user", job_id=job.id, actor=actor)
        s.commit()
        s.refresh(job)
        return job
