"""Database engine and schema: SQLite in WAL mode by default, any SQLAlchemy URL otherwise.

WAL lets the CLI read while the daemon writes; busy_timeout makes short write contention wait
instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, select

from scheduler import models
from scheduler.errors import UserError

SCHEMA_VERSION = 1

# Ordered migrations from version N-1 to N; version 1 is the initial create_all.
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {}


def _sqlite_path(url: str) -> Path | None:
    made = sa.engine.make_url(url)
    if made.get_backend_name() != "sqlite" or not made.database or made.database == ":memory:":
        return None
    return Path(made.database)


def make_engine(url: str) -> Engine:
    path = _sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except (sa.exc.ArgumentError, ModuleNotFoundError) as e:
        raise UserError(f"database_url {url!r} is not usable: {e}") from None


def init_db(engine: Engine) -> None:
    """Create tables on a new database; apply pending migrations on an old one."""
    SQLModel.metadata.create_all(engine)
    with Session(engine) as s:
        row = s.get(models.SchemaVersion, 1)
        if row is None:
            s.add(models.SchemaVersion(id=1, version=SCHEMA_VERSION))
            s.commit()
            return
        if row.version > SCHEMA_VERSION:
            raise UserError(
                f"the database schema is version {row.version}, newer than this spotwise "
                f"({SCHEMA_VERSION}); upgrade spotwise"
            )
        for v in range(row.version + 1, SCHEMA_VERSION + 1):
            with engine.begin() as conn:
                MIGRATIONS[v](conn)
            row.version = v
            s.add(row)
            s.commit()


def open_db(url: str) -> Engine:
    engine = make_engine(url)
    init_db(engine)
    return engine


def open_existing(url: str) -> Engine:
    """For read commands: fail clearly when the daemon has never created the database."""
    path = _sqlite_path(url)
    if path is not None and not path.exists():
        raise UserError(f"no spotwise database at {path}; start the daemon or submit a job first")
    return open_db(url)


__all__ = ["Session", "make_engine", "open_db", "open_existing", "select"]
