"""unaccrued attempts: a partial index, so an idle accrual reads no history

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-10 09:00:00.000000

The accrual looked for attempts not yet charged up to their end with an OR over every
attempt row (a full scan, 10,000 finished attempts a pass); this index holds only those
rows, so it costs as much with a long history as without.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UNACCRUED = "accrued_until IS NULL OR accrued_until != ended_at"  # scheduler.state.models.UNACCRUED


def upgrade() -> None:
    op.create_index(
        "ix_attempt_unaccrued",
        "attempt",
        ["state"],
        sqlite_where=sa.text(UNACCRUED),
        postgresql_where=sa.text(UNACCRUED),
    )


def downgrade() -> None:
    op.drop_index("ix_attempt_unaccrued", table_name="attempt")
