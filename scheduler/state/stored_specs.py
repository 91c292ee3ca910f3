"""The stored job specs that today's validation refuses, for `spotwise db upgrade` and the
daemon's start.

A database upgraded in place, or a GPU registry, region list or env rule that changed since
a job was submitted, can leave specs that no longer validate. The daemon never lets one stop
other launches or kill a running instance (such a job runs on where it is, or fails with the
reason when it would be placed); this lists them so an operator sees them at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from scheduler.core.jobspec import StoredSpecInvalid, load_stored
from scheduler.core.states import JobState
from scheduler.state.models import Job


@dataclass(frozen=True, slots=True)
class InvalidSpec:
    job_id: str
    name: str
    state: JobState
    problem: str

    def line(self) -> str:
        return f"job {self.job_id} ({self.name}, {self.state.value}): {self.problem}"


def invalid_specs(engine: Engine) -> list[InvalidSpec]:
    """Every unfinished job whose stored spec no longer validates (each distinct spec is
    parsed once: jobs are often submitted by the thousand from one file)."""
    active = [s for s in JobState if not s.terminal]
    seen: dict[str, str | None] = {}
    out: list[InvalidSpec] = []
    with Session(engine) as s:
        rows = s.exec(
            select(Job.id, Job.name, Job.state, Job.spec_json)
            .where(col(Job.state).in_(active))
            .order_by(col(Job.created_at))
        ).all()
    for job_id, name, state, spec_json in rows:
        if spec_json not in seen:
            try:
                load_stored(spec_json)
                seen[spec_json] = None
            except StoredSpecInvalid as e:
                seen[spec_json] = str(e)
        problem = seen[spec_json]
        if problem is not None:
            out.append(InvalidSpec(job_id, name, JobState(state), problem))
    return out
