"""accounts and alerts: API users and their tokens (only hashes), the budget alerts already
raised, and the webhook outbox

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-14 09:00:00.000000

The API server authenticates people by tokens and scopes them by team and role; the daemon
raises each budget alert once per window and sends it to a webhook with retries from an
outbox, so neither a restart nor a failing webhook loses or repeats one.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

import scheduler.state.models

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None

_text = sqlmodel.sql.sqltypes.AutoString
_time = scheduler.state.models.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "apiuser",
        sa.Column("name", _text(), nullable=False),
        sa.Column("role", _text(), nullable=False),
        sa.Column("teams", _text(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("created_by", _text(), nullable=False),
        sa.Column("disabled_at", _time(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "apitoken",
        sa.Column("id", _text(), nullable=False),
        sa.Column("user_name", _text(), nullable=False),
        sa.Column("secret_sha256", _text(), nullable=False),
        sa.Column("label", _text(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("created_by", _text(), nullable=False),
        sa.Column("expires_at", _time(), nullable=True),
        sa.Column("revoked_at", _time(), nullable=True),
        sa.ForeignKeyConstraint(["user_name"], ["apiuser.name"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_apitoken_user_name", "apitoken", ["user_name"])
    op.create_table(
        "budgetalert",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("budget", _text(), nullable=False),
        sa.Column("window_key", _text(), nullable=False),
        sa.Column("kind", _text(), nullable=False),
        sa.Column("at", _time(), nullable=False),
        sa.Column("message", _text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("budget", "window_key", "kind"),
    )
    op.create_index("ix_budgetalert_budget", "budgetalert", ["budget"])
    op.create_table(
        "webhookdelivery",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("payload_json", _text(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", _time(), nullable=False),
        sa.Column("delivered_at", _time(), nullable=True),
        sa.Column("gave_up_at", _time(), nullable=True),
        sa.Column("last_error", _text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhookdelivery_next_try_at", "webhookdelivery", ["next_try_at"])


def downgrade() -> None:
    op.drop_index("ix_webhookdelivery_next_try_at", table_name="webhookdelivery")
    op.drop_table("webhookdelivery")
    op.drop_index("ix_budgetalert_budget", table_name="budgetalert")
    op.drop_table("budgetalert")
    op.drop_index("ix_apitoken_user_name", table_name="apitoken")
    op.drop_table("apitoken")
    op.drop_table("apiuser")
