"""gang instances: one row per node of an attempt, the gang size, learned gang capacity

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 09:00:00.000000

Every existing attempt that has an instance gets its node-0 row (backfill), so the gang
code paths and the single-node ones read the same table.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("nodes", sa.Integer(), nullable=False, server_default="1"))
    with op.batch_alter_table("poolstate", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gang_capacity", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("gang_capacity_until", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                "gang_capacity_reason",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default="",
            )
        )
    op.create_table(
        "attemptinstance",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("attempt_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("instance_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("instance_scope", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("region", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("zone", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("started_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("accrued_until", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("ended_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("notice_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("end_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["attempt_id"], ["attempt.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("attempt_id", "node"),
    )
    with op.batch_alter_table("attemptinstance", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_attemptinstance_attempt_id"), ["attempt_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_attemptinstance_instance_id"), ["instance_id"], unique=False
        )
    # Backfill: node 0 of every attempt that had an instance, its state and spend carried.
    op.execute(
        """
        INSERT INTO attemptinstance (id, attempt_id, node, instance_id, instance_scope, region,
            zone, state, started_at, accrued_until, ended_at, notice_at, end_reason, exit_code,
            cost_usd)
        SELECT id || '-n0', id, 0, instance_id, instance_scope, region, zone,
            CASE state WHEN 'ENDED' THEN 'ENDED' WHEN 'LAUNCHING' THEN 'LAUNCHING'
                ELSE 'RUNNING' END,
            started_at, accrued_until, ended_at, notice_at, NULL, exit_code, cost_usd
        FROM attempt WHERE instance_id IS NOT NULL
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("attemptinstance", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attemptinstance_instance_id"))
        batch_op.drop_index(batch_op.f("ix_attemptinstance_attempt_id"))
    op.drop_table("attemptinstance")
    with op.batch_alter_table("poolstate", schema=None) as batch_op:
        batch_op.drop_column("gang_capacity_reason")
        batch_op.drop_column("gang_capacity_until")
        batch_op.drop_column("gang_capacity")
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("nodes")
