"""The read commands' way into the daemon's database: plain SQL, no ORM, no SQLAlchemy on SQLite.

People and scripts run `spotwise status` and `show` many times a minute, and on SQLite (the
default) importing SQLAlchemy and the tables cost those commands far more than their queries.
A SQLite file is therefore read here through the standard library's sqlite3; any other URL
(PostgreSQL) through the engine `db.open_existing` builds, by its own DB-API connection, so the
read models hold one SQL text for both. The checks and messages are open_existing's (a read
never creates or migrates a database), and a read writes nothing: the SQLite connection is
`query_only` and never sets the journal mode. (SQLite itself keeps its `-wal` and `-shm` files
beside the database while a connection is open, and removes them when the last one closes.)

`db.py` holds the same schema check for the engine; both ask `revisions.head_revision`, which
reads the migration files without importing SQLAlchemy or Alembic.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.core.errors import UserError
from scheduler.state.revisions import LEGACY_REVISION, head_revision

if TYPE_CHECKING:
    from typing import TypeAlias

    from sqlalchemy.engine import Engine


# Runs one statement (`?` placeholders) and returns its rows as the driver gives them.
Query = Callable[..., list[tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class SqliteFile:
    """A daemon's SQLite database, found and at this spotwise's schema, read with sqlite3."""

    url: str
    path: Path


if TYPE_CHECKING:
    # What the read models read from: a checked SQLite file, or an engine (PostgreSQL; the
    # tests' and the daemon's own engines on SQLite too).
    Database: TypeAlias = "SqliteFile | Engine"


def sqlite_file(url: str) -> Path | None:
    """The file of a plain `sqlite:///PATH` URL, else None (a URL with options, escapes or
    another driver goes through SQLAlchemy, which reads every form)."""
    prefix = "sqlite:///"
    rest = url[len(prefix) :] if url.startswith(prefix) else ""
    if not rest or rest == ":memory:" or any(c in rest for c in "?#%"):
        return None
    return Path(rest)


def open_for_reading(url: str) -> Database:
    """The daemon's database as it is, to read: never created, never migrated."""
    path = sqlite_file(url)
    if path is None:
        from scheduler.state.db import open_existing

        return open_existing(url)
    if not path.exists():
        raise UserError(
            f"no spotwise database at {path}: start the daemon first (spotwise daemon), "
            "or point --config / $SPOTWISE_CONFIG at the daemon's config"
        )
    db = SqliteFile(url, path)
    try:
        with reading(db) as query:
            rev = _revision(query)
    except sqlite3.DatabaseError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(
            f"the database at {url} is not a spotwise database or is corrupted: {first}"
        ) from None
    if rev is None:
        raise UserError(f"the database at {url} has no spotwise tables yet")
    head = head_revision()
    if rev != head:
        raise UserError(
            f"the database at {url} is at schema {rev}, this spotwise needs {head}: "
            "restart the daemon, or run 'spotwise db upgrade'"
        )
    return db


def _revision(query: Query) -> str | None:
    tables = {name for (name,) in query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "alembic_version" in tables:
        rows = query("SELECT version_num FROM alembic_version")
        return str(rows[0][0]) if rows else None
    return LEGACY_REVISION if "job" in tables else None


@contextmanager
def reading(db: Database) -> Iterator[Query]:
    """Run statements in one read transaction (one snapshot on SQLite). Statements use `?`
    placeholders, rewritten for drivers that take `%s`; a literal `%` is never in them."""
    if isinstance(db, SqliteFile):
        with _sqlite_reading(db.path) as query:
            yield query
        return
    with db.connect() as c:
        dbapi = c.connection.dbapi_connection
        assert dbapi is not None
        pyformat = db.dialect.paramstyle in ("format", "pyformat")

        def query(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
            cur = dbapi.cursor()
            try:
                cur.execute(sql.replace("?", "%s") if pyformat else sql, tuple(params))
                return list(cur.fetchall())
            finally:
                cur.close()

        yield query


@contextmanager
def _sqlite_reading(path: Path) -> Iterator[Query]:
    # mode=rw: never create the file (it was found, but may be gone since); a read-only
    # connection (mode=ro) would leave the -wal and -shm files behind it.
    uri = f"{path.absolute().as_uri()}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("BEGIN")

        def query(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
            return conn.execute(sql, tuple(params)).fetchall()

        yield query
        conn.execute("COMMIT")
    finally:
        conn.close()


def placeholders(values: Sequence[Any]) -> str:
    """`?, ?, ?` for an IN list of `values` (never empty: callers skip an empty list)."""
    return ", ".join("?" * len(values))
