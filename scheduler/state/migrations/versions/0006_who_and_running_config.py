"""who did it, and what the daemon runs with: job.submitted_by, event.actor and the
configuration the daemon recorded beside its heartbeat (daemonlease.config_json)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-12 09:00:00.000000

The CLI read budgets and providers from its own config file while the daemon enforced
its own: the daemon now records the configuration it runs with, so `budget`, `report`,
`cost` and `status` show that. The Unix user behind submit, cancel, release and requeue is
kept on the job and on each event it causes, so the audit log says who asked.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(
            sa.Column(
                "submitted_by",
                sqlmodel.sql.sqltypes.AutoString(),
                nullable=False,
                server_default="",
            )
        )
    with op.batch_alter_table("event") as batch:
        batch.add_column(sa.Column("actor", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    with op.batch_alter_table("daemonlease") as batch:
        batch.add_column(
            sa.Column(
                "config_json", sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default=""
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("daemonlease") as batch:
        batch.drop_column("config_json")
    with op.batch_alter_table("event") as batch:
        batch.drop_column("actor")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("submitted_by")
