"""Per-job back-off, spend buckets, daemon lease, leak memory

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 11:22:20.608260
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "daemonlease",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("holder", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("started_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("renewed_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "leakseen",
        sa.Column("resource_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("provider", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("first_seen_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("resource_id"),
    )
    op.create_table(
        "spendbucket",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hour", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("attempt_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("job_name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("team", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("cloud", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("usd", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hour", "attempt_id"),
    )
    with op.batch_alter_table("spendbucket", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_spendbucket_attempt_id"), ["attempt_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_spendbucket_hour"), ["hour"], unique=False)
        batch_op.create_index(batch_op.f("ix_spendbucket_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_spendbucket_team"), ["team"], unique=False)

    op.drop_table("schemaversion")
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("billed_price", sa.Float(), nullable=True))
        batch_op.add_column(
            sa.Column(
                "instance_scope",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default=sa.text("''"),
            )
        )
        batch_op.add_column(
            sa.Column("launch_requested_at", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("accrued_until", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("terminate_sent_at", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("notice_at", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                "detail",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default=sa.text("''"),
            )
        )

    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("failures", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch_op.add_column(
            sa.Column("not_before", scheduler.state.models.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("step_failures", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch_op.add_column(
            sa.Column(
                "last_error",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default=sa.text("''"),
            )
        )
        batch_op.create_index(batch_op.f("ix_job_updated_at"), ["updated_at"], unique=False)

    _backfill()


def _backfill() -> None:
    """Spend already accrued by 0.1 (cost_usd, recomputed as price x hours each pass) is kept:
    accrual resumes where 0.1 left off, and one spend bucket per attempt carries it (at the
    hour the attempt started) so budgets keep counting it."""
    from datetime import timedelta

    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT a.id, a.job_id, j.name, j.team, a.cloud, a.started_at, a.ended_at, "
            "a.cost_usd, a.price_per_hour FROM attempt a JOIN job j ON a.job_id = j.id "
            "WHERE a.started_at IS NOT NULL"
        )
    ).all()
    dt = scheduler.state.models.UTCDateTime()
    buckets = []
    for aid, job_id, name, team, cloud, started, ended, cost, price in rows:
        started = dt.process_result_value(_as_dt(started), bind.dialect)
        ended = dt.process_result_value(_as_dt(ended), bind.dialect)
        if ended is not None:
            until = ended
        else:
            until = started + timedelta(hours=(cost or 0.0) / price) if price else started
        bind.execute(
            sa.text(
                "UPDATE attempt SET accrued_until = :u, billed_price = price_per_hour WHERE id = :i"
            ),
            {"u": dt.process_bind_param(until, bind.dialect), "i": aid},
        )
        if cost:
            hour = started.replace(minute=0, second=0, microsecond=0)
            buckets.append(
                {"hour": hour, "attempt_id": aid, "job_id": job_id, "job_name": name,
                 "team": team, "cloud": cloud, "usd": cost}
            )  # fmt: skip
    if buckets:
        table = sa.table(
            "spendbucket",
            sa.column("hour", scheduler.state.models.UTCDateTime()),
            sa.column("attempt_id"),
            sa.column("job_id"),
            sa.column("job_name"),
            sa.column("team"),
            sa.column("cloud"),
            sa.column("usd"),
        )
        op.bulk_insert(table, buckets)


def _as_dt(value):  # type: ignore[no-untyped-def]
    """SQLite hands back text for a raw SELECT; other databases a datetime."""
    from datetime import datetime

    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_updated_at"))
        batch_op.drop_column("last_error")
        batch_op.drop_column("step_failures")
        batch_op.drop_column("not_before")
        batch_op.drop_column("failures")

    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("detail")
        batch_op.drop_column("notice_at")
        batch_op.drop_column("terminate_sent_at")
        batch_op.drop_column("accrued_until")
        batch_op.drop_column("launch_requested_at")
        batch_op.drop_column("instance_scope")
        batch_op.drop_column("billed_price")

    op.create_table(
        "schemaversion",
        sa.Column("id", sa.INTEGER(), nullable=False),
        sa.Column("version", sa.INTEGER(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("spendbucket", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_spendbucket_team"))
        batch_op.drop_index(batch_op.f("ix_spendbucket_job_id"))
        batch_op.drop_index(batch_op.f("ix_spendbucket_hour"))
        batch_op.drop_index(batch_op.f("ix_spendbucket_attempt_id"))

    op.drop_table("spendbucket")
    op.drop_table("leakseen")
    op.drop_table("daemonlease")
