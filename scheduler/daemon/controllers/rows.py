"""Bulk row access for the controllers: a pass touches thousands of rows, so it loads them a
chunk of ids per query (into the session's identity map, where a later `s.get` costs no
query and no autoflush) instead of one round trip per row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import sqlalchemy as sa
from sqlmodel import Session, SQLModel, col, select

from scheduler.core.states import AttemptState
from scheduler.state.models import Attempt

CHUNK = 500  # ids per IN (...) list, well under every database's bound-parameter limit
LIVE = (AttemptState.LAUNCHING, AttemptState.RUNNING, AttemptState.STOPPING)
M = TypeVar("M", bound=SQLModel)


def chunks(ids: Sequence[str], n: int = CHUNK) -> list[list[str]]:
    unique = list(dict.fromkeys(ids))
    return [unique[i : i + n] for i in range(0, len(unique), n)]


def load_by_id(s: Session, model: type[M], ids: Sequence[str]) -> dict[str, M]:
    """Rows by primary key (`id`); they stay in the session for `s.get`."""
    pk = col(model.id)  # type: ignore[attr-defined]
    out: dict[str, M] = {}
    for chunk in chunks(ids):
        for row in s.exec(select(model).where(pk.in_(chunk))).all():
            out[row.id] = row  # type: ignore[attr-defined]
    return out


def live_job_ids(s: Session, job_ids: Sequence[str]) -> set[str]:
    """Which of these jobs already have a live attempt."""
    return set(live_attempt_ids(s, job_ids))


def live_attempt_ids(s: Session, job_ids: Sequence[str]) -> dict[str, set[str]]:
    """job id -> the ids of its live attempts, for those of these jobs that have any (one,
    or two while an attempt placed on a notice runs beside the noticed one)."""
    out: dict[str, set[str]] = {}
    for chunk in chunks(job_ids):
        for job_id, attempt_id in s.exec(
            select(Attempt.job_id, Attempt.id).where(
                col(Attempt.job_id).in_(chunk), col(Attempt.state).in_(LIVE)
            )
        ).all():
            out.setdefault(job_id, set()).add(attempt_id)
    return out


def table_of(model: type[SQLModel]) -> sa.Table:
    """The model's Table, for core INSERTs of many rows (no ORM object per row)."""
    table: sa.Table = model.__table__  # type: ignore[attr-defined]
    return table
