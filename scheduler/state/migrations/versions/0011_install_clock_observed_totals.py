"""install id, clock reading, provider observations, budget running totals, foreign leaks

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-20 09:00:00.000000

`installation` holds this database's install id (made here, once: it tags every resource
the daemon creates, so leak collection touches only its own) and the last clock reading
(time only moves forward). `providerstate` is when each provider last described its live
instances (spend accrues up to there). `budgetspend` keeps a running total of each window's
accrued spend, `job` what a budget had spent when it held the job (a refund releases it),
and `leakseen` why a resource is not ours (reported, never terminated).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def new_install_id() -> str:
    """16 lowercase hex digits: a valid tag or label value on every cloud (GCE labels are
    lowercase letters, digits, '_' and '-')."""
    return secrets.token_hex(8)


def upgrade() -> None:
    installation = op.create_table(
        "installation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("install_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("clock_reading", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    now = datetime.now(UTC).replace(tzinfo=None)
    op.bulk_insert(installation, [{"id": 1, "install_id": new_install_id(), "created_at": now}])
    op.create_table(
        "providerstate",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("observed_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held_spent_usd", sa.Float(), nullable=True))
    with op.batch_alter_table("budgetspend", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("accrued_usd", sa.Float(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column(
                "accrued_key",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default="",
            )
        )
    with op.batch_alter_table("leakseen", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "not_ours", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default=""
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("leakseen", schema=None) as batch_op:
        batch_op.drop_column("not_ours")
    with op.batch_alter_table("budgetspend", schema=None) as batch_op:
        batch_op.drop_column("accrued_key")
        batch_op.drop_column("accrued_usd")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("held_spent_usd")
    op.drop_table("providerstate")
    op.drop_table("installation")
