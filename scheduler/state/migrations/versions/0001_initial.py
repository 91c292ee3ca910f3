"""initial schema (spotwise 0.1)

The tables 0.1 created with create_all; a 0.1 database without alembic_version is stamped
at this revision before upgrading. Enum columns are plain strings (as SQLite stored them).

Revision ID: 0001
Revises:
Create Date: 2026-12-01 11:12:57.963486
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgetspend",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("scope", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("window", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("window_start", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("limit_usd", sa.Float(), nullable=False),
        sa.Column("hard", sa.Boolean(), nullable=False),
        sa.Column("spent_usd", sa.Float(), nullable=False),
        sa.Column("burn_per_hour", sa.Float(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("updated_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("level", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("attempt_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("message", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_event_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_event_job_id"), ["job_id"], unique=False)

    op.create_table(
        "job",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("team", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("spec_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("checkpoint_uri", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("updated_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("deadline", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("settled_attempt", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("held_budget", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("held_window_start", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("held_limit_usd", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("recoveries", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("progress_step", sa.Integer(), nullable=True),
        sa.Column("total_steps", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_name"), ["name"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_team"), ["team"], unique=False)

    op.create_table(
        "poolstate",
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("unavailable_until", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("unavailable_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("interruptions", sa.Integer(), nullable=False),
        sa.Column("exposure_hours", sa.Float(), nullable=False),
        sa.Column("last_interrupted_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("pool"),
    )
    op.create_table(
        "pricesample",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("observed_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("cloud", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("region", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("zone", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("instance_type", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("market", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("pricesample", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_pricesample_observed_at"), ["observed_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_pricesample_pool"), ["pool"], unique=False)

    op.create_table(
        "schemaversion",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "attempt",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("token", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("provider", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("cloud", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("region", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("zone", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("instance_type", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("market", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("instance_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("started_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("ended_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("stop_requested_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("stop_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("end_reason", sa.String(length=32), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["job.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token"),
    )
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_attempt_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_attempt_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_attempt_pool"), ["pool"], unique=False)
        batch_op.create_index(batch_op.f("ix_attempt_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempt_state"))
        batch_op.drop_index(batch_op.f("ix_attempt_pool"))
        batch_op.drop_index(batch_op.f("ix_attempt_job_id"))
        batch_op.drop_index(batch_op.f("ix_attempt_instance_id"))

    op.drop_table("attempt")
    op.drop_table("schemaversion")
    with op.batch_alter_table("pricesample", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pricesample_pool"))
        batch_op.drop_index(batch_op.f("ix_pricesample_observed_at"))

    op.drop_table("pricesample")
    op.drop_table("poolstate")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_team"))
        batch_op.drop_index(batch_op.f("ix_job_state"))
        batch_op.drop_index(batch_op.f("ix_job_name"))

    op.drop_table("job")
    with op.batch_alter_table("event", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_event_job_id"))
        batch_op.drop_index(batch_op.f("ix_event_at"))

    op.drop_table("event")
    op.drop_table("budgetspend")
