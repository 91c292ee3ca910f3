"""an attempt placed beside a noticed one: which it replaces, and its deferred store claim

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 12:00:00.000000

When an attempt of a single-node job gets an interruption notice, the next attempt is placed
at once, while the old instance still saves. The new attempt names the one it replaces, and
its claim of the checkpoint store waits until that attempt has ended or its notice window has
passed: both are read from the database at every pass, so a restart loses nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("replaces", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("claim_pending", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("claim_pending")
        batch_op.drop_column("replaces")
