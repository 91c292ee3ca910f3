"""The audit log: one append-only Event row for everything the daemon decides, and why."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from scheduler.state.models import Event

log = logging.getLogger("spotwise")

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def emit(
    session: Session,
    at: datetime,
    kind: str,
    message: str,
    *,
    job_id: str | None = None,
    attempt_id: str | None = None,
    level: str = "info",
    actor: str | None = None,
) -> None:
    """Add an event to the session (committed with the decision it explains) and log it.
    `actor`: the Unix user whose command caused it (None: the daemon decided)."""
    session.add(
        Event(
            at=at,
            kind=kind,
            message=message,
            job_id=job_id,
            attempt_id=attempt_id,
            level=level,
            actor=actor,
        )
    )
    prefix = f"[{job_id}] " if job_id else ""
    if actor:
        message = f"{message} (by {actor})"
    log.log(_LEVELS.get(level, logging.INFO), "%s%s: %s", prefix, kind, message)


def event(
    at: datetime,
    kind: str,
    message: str,
    *,
    job_id: str | None = None,
    attempt_id: str | None = None,
    level: str = "info",
) -> dict[str, Any]:
    """One Event row as a dict, for `emit_many`."""
    return {
        "at": at,
        "level": level,
        "kind": kind,
        "job_id": job_id,
        "attempt_id": attempt_id,
        "message": message,
    }


def emit_many(session: Session, events: list[dict[str, Any]]) -> None:
    """Many events in one INSERT (a pass's hundreds of launches), logged as `emit` logs
    each: the same rows, without building an ORM object per event."""
    if not events:
        return
    table: sa.Table = Event.__table__  # type: ignore[attr-defined]
    session.execute(sa.insert(table), events)
    for e in events:
        prefix = f"[{e['job_id']}] " if e["job_id"] else ""
        log.log(_LEVELS.get(e["level"], logging.INFO), "%s%s: %s", prefix, e["kind"], e["message"])
