"""gang rounds: a lost node replaced while the others keep running

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-16 09:00:00.000000

A gang that loses a node may now keep its other nodes and launch one replacement: the
replacement is a second AttemptInstance row for the same node rank, in a later rendezvous
round (`round`; the unique key becomes attempt, node and round), billed at its own price
when it went to another pool (`pool`, `price_per_hour`). Each recovery, replaced or
re-placed whole, is a GangRound row with the decision and its progress.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# 0004 left the unique key unnamed: PostgreSQL named it itself; SQLite's reflection has no
# name, so batch mode names it by this convention to drop it.
_CONVENTION = {"uq": "uq_%(table_name)s_%(column_0_name)s"}
_PG_OLD_KEY = "attemptinstance_attempt_id_node_key"
_NEW_KEY = "uq_attemptinstance_attempt_node_round"


def upgrade() -> None:
    columns = [
        sa.Column("round", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default=""),
        sa.Column("price_per_hour", sa.Float(), nullable=True),
    ]
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(_PG_OLD_KEY, "attemptinstance", type_="unique")
        for c in columns:
            op.add_column("attemptinstance", c)
        op.create_unique_constraint(_NEW_KEY, "attemptinstance", ["attempt_id", "node", "round"])
    else:
        with op.batch_alter_table("attemptinstance", naming_convention=_CONVENTION) as batch:
            batch.drop_constraint("uq_attemptinstance_attempt_id", type_="unique")
            for c in columns:
                batch.add_column(c)
            batch.create_unique_constraint(_NEW_KEY, ["attempt_id", "node", "round"])
    op.create_table(
        "ganground",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("attempt_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("nodes", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("lost", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("decided_at", scheduler.state.models.UTCDateTime(), nullable=False),
        sa.Column("deadline", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("directive_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("resumed_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("ended_at", scheduler.state.models.UTCDateTime(), nullable=True),
        sa.Column("detail", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.ForeignKeyConstraint(["attempt_id"], ["attempt.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("attempt_id", "round"),
    )
    with op.batch_alter_table("ganground", schema=None) as batch:
        batch.create_index(batch.f("ix_ganground_attempt_id"), ["attempt_id"], unique=False)
        batch.create_index(batch.f("ix_ganground_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ganground", schema=None) as batch:
        batch.drop_index(batch.f("ix_ganground_state"))
        batch.drop_index(batch.f("ix_ganground_attempt_id"))
    op.drop_table("ganground")
    # Rows of later rounds cannot keep their (attempt, node) once the key is narrower.
    op.execute("DELETE FROM attemptinstance WHERE round > 0")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(_NEW_KEY, "attemptinstance", type_="unique")
        for name in ("price_per_hour", "pool", "round"):
            op.drop_column("attemptinstance", name)
        op.create_unique_constraint(_PG_OLD_KEY, "attemptinstance", ["attempt_id", "node"])
    else:
        with op.batch_alter_table("attemptinstance") as batch:
            batch.drop_constraint(_NEW_KEY, type_="unique")
            for name in ("price_per_hour", "pool", "round"):
                batch.drop_column(name)
            batch.create_unique_constraint(_PG_OLD_KEY, ["attempt_id", "node"])
