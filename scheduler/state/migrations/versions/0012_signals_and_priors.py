"""early signals on attempts; each pool's prior from its cloud's risk data and its outages

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 09:00:00.000000

An attempt records when an early interruption signal (an AWS rebalance recommendation) came
and what the daemon did about it, so the decision is made once and survives a restart. A
pool keeps the prior interruption rate its cloud's risk data gave (and which signal it came
from), and the lengths of its recent outages, from which its "avoid after interrupt" time is
learned. An attempt of a job with `checkpoint_interval = "auto"` records the interval the
daemon last told it.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _text(name: str, default: str = "") -> sa.Column:
    return sa.Column(
        name,
        sqlmodel.sql.sqltypes.AutoString(),
        nullable=False,
        server_default=sa.text(f"'{default}'"),
    )


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("early_signal_at", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(_text("early_action"))
        batch_op.create_index("ix_attempt_early_signal_at", ["early_signal_at"], unique=False)
        batch_op.add_column(sa.Column("checkpoint_interval_s", sa.Float(), nullable=True))
    with op.batch_alter_table("poolstate", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prior_rate", sa.Float(), nullable=True))
        batch_op.add_column(_text("prior_source"))
        batch_op.add_column(
            sa.Column("prior_at", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(_text("outage_hours", "[]"))
        batch_op.add_column(
            sa.Column("outage_since", scheduler.state.models.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("poolstate", schema=None) as batch_op:
        for name in ("outage_since", "outage_hours", "prior_at", "prior_source", "prior_rate"):
            batch_op.drop_column(name)
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("checkpoint_interval_s")
        batch_op.drop_index("ix_attempt_early_signal_at")
        batch_op.drop_column("early_action")
        batch_op.drop_column("early_signal_at")
