"""This database's identity and the latest time its daemon read (the `installation` row).

The install id tags every resource the daemon creates, so leak collection can prove a
resource is its own (another deployment may share the owner tag in the same account). The
clock reading only moves forward: each accrual records it, and a daemon whose clock reads
further behind it than a tolerance refuses to start instead of billing backwards.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from scheduler.core.errors import UserError
from scheduler.state.models import Installation

# How far behind the recorded reading a starting daemon's clock may be (real time; an NTP
# correction or two). Further, and it refuses to start.
CLOCK_TOLERANCE = timedelta(minutes=5)


def install_id(engine: Engine) -> str:
    """The database's install id (made by the migration that created the table)."""
    with Session(engine) as s:
        row = s.get(Installation, 1)
    if row is None:  # every migrated database has it; a hand-made one might not
        raise UserError("the database has no installation row: run 'spotwise db upgrade'")
    return row.install_id


def clock_reading(engine: Engine) -> datetime | None:
    with Session(engine) as s:
        row = s.get(Installation, 1)
    return None if row is None else row.clock_reading


def note_clock(s: Session, now: datetime) -> None:
    """Record `now` as the latest reading, if it is later (in the caller's transaction)."""
    t: sa.Table = Installation.__table__  # type: ignore[attr-defined]
    s.execute(
        sa.update(t)
        .where(t.c.id == 1, sa.or_(t.c.clock_reading.is_(None), t.c.clock_reading < now))
        .values(clock_reading=now)
    )


def check_clock(engine: Engine, now: datetime, speedup: float = 1.0) -> datetime | None:
    """The recorded reading (the floor of the daemon's clock), or UserError (one line) when
    `now` is behind it by more than CLOCK_TOLERANCE (scaled to the clock's speed)."""
    reading = clock_reading(engine)
    if reading is None or now >= reading:
        return reading
    behind = reading - now
    if behind <= CLOCK_TOLERANCE * max(1.0, speedup):
        return reading
    raise UserError(
        f"the clock reads {now:%Y-%m-%d %H:%M:%S}Z, {_span(behind)} behind the latest time "
        f"this database recorded ({reading:%Y-%m-%d %H:%M:%S}Z): refusing to start, since "
        "billing would run backwards; correct the clock (NTP) or wait until it passes that "
        "time (on the local market, a lower speedup or a cloud added beside it moves its "
        "clock back: use a new state directory)"
    )


def _span(d: timedelta) -> str:
    s = d.total_seconds()
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
