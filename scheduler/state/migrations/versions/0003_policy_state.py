"""policy state: what each job's deadline policy learned survives restarts and reloads

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 12:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policystate",
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("policy", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("shape", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default=""),
        sa.Column(
            "state_json",
            sqlmodel.sql.sqltypes.AutoString(),
            nullable=False,
            server_default="{}",
        ),
        sa.Column("updated_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_index("ix_policystate_shape", "policystate", ["shape"])


def downgrade() -> None:
    op.drop_index("ix_policystate_shape", table_name="policystate")
    op.drop_table("policystate")
