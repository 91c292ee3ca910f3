"""job.checkpoint_uri indexed: who else uses a checkpoint store, asked at submit and launch

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-12 09:00:00.000000

Submit refuses a store another job uses, and the launch pass asks again before it claims
one; both look jobs up by their checkpoint URI, which without this index is a scan of every
job ever submitted.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_checkpoint_uri", "job", ["checkpoint_uri"])


def downgrade() -> None:
    op.drop_index("ix_job_checkpoint_uri", table_name="job")
