"""Alembic environment: runs migrations on the connection scheduler.state.db hands it.

Batch mode everywhere, so SQLite (which cannot ALTER most things) gets the copy-and-move
migrations Alembic generates for it; PostgreSQL takes the same scripts as plain ALTERs.
"""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from scheduler.state import models  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine

        engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://")
        with engine.connect() as conn:
            _run(conn)
        return
    _run(connection)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection, target_metadata=target_metadata, render_as_batch=True,
        compare_type=True,
    )  # fmt: skip
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
