"""The audit log: one append-only Event row for everything the daemon decides, and why."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlmodel import Session

from scheduler.models import Event

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
) -> None:
    """Add an event to the session (committed with the decision it explains) and log it."""
    session.add(
        Event(at=at, kind=kind, message=message, job_id=job_id, attempt_id=attempt_id, level=level)
    )
    prefix = f"[{job_id}] " if job_id else ""
    log.log(_LEVELS.get(level, logging.INFO), "%s%s: %s", prefix, kind, message)
