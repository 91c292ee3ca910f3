"""Database engine and schema: SQLite in WAL mode by default, any SQLAlchemy URL otherwise.

WAL lets the CLI read while the daemon writes; busy_timeout makes short write contention wait
instead of failing. The schema is managed by Alembic (scheduler/migrations): the daemon
upgrades on start; read commands never create or change a database.
"""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from scheduler.errors import UserError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
LEGACY_REVISION = "0001"  # what a 0.1 database (create_all, no alembic_version) matches


def redact_url(url: str) -> str:
    """The URL with any password replaced, for every message a person may read."""
    try:
        made = sa.engine.make_url(url)
    except Exception:
        return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
    return made.render_as_string(hide_password=True)


def sqlite_path(url: str) -> Path | None:
    made = sa.engine.make_url(url)
    if made.get_backend_name() != "sqlite" or not made.database or made.database == ":memory:":
        return None
    return Path(made.database)


def make_engine(url: str, *, create_dir: bool = False) -> Engine:
    try:
        path = sqlite_path(url)
    except sa.exc.ArgumentError as e:
        raise UserError(f"database_url {redact_url(url)!r} is not a database URL: {e}") from None
    if path is not None:
        if create_dir:
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
        raise UserError(f"database_url {redact_url(url)!r} is not usable: {e}") from None


def _alembic_config(connection: sa.Connection):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision; LEGACY_REVISION for a 0.1 database; None if empty."""
    insp = sa.inspect(engine)
    tables = set(insp.get_table_names())
    if "alembic_version" in tables:
        with engine.connect() as c:
            return c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return LEGACY_REVISION if "job" in tables else None


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to head (the daemon on start, `spotwise db upgrade`). Returns
    (from, to). A 0.1 database is stamped at its revision first, then upgraded."""
    from alembic import command

    before = current_revision(engine)
    head = head_revision()
    if before == head:
        return before, head
    known = _known_revisions()
    if before is not None and before not in known:
        raise UserError(
            f"the database schema is at revision {before}, which this spotwise does not know "
            "(it is newer): upgrade spotwise"
        )
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            # Batch migrations rebuild tables that others reference: foreign keys are checked
            # again once the schema is whole (the pragma is a no-op inside a transaction).
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        cfg = _alembic_config(conn)
        if (
            before == LEGACY_REVISION
            and "alembic_version" not in sa.inspect(conn).get_table_names()
        ):
            command.stamp(cfg, LEGACY_REVISION)
        command.upgrade(cfg, "head")
        conn.commit()
        if sqlite:
            conn.exec_driver_sql("PRAGMA foreign_keys=ON")
    return before, head


def _known_revisions() -> set[str]:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return {s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()}


def open_db(url: str) -> Engine:
    """For the daemon: create the database if needed and bring its schema to head."""
    engine = make_engine(url, create_dir=True)
    try:
        upgrade(engine)
    except sa.exc.DatabaseError as e:
        raise UserError(_unusable(url, e)) from None
    return engine


def open_existing(url: str) -> Engine:
    """For the CLI: the daemon's database as it is. Never creates one (a job submitted into a
    private new database would stay PENDING forever), never migrates one."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise UserError(
            f"no spotwise database at {path}: start the daemon first (spotwise daemon), "
            "or point --config / $SPOTWISE_CONFIG at the daemon's config"
        )
    engine = make_engine(url)
    try:
        rev = current_revision(engine)
    except sa.exc.DatabaseError as e:
        raise UserError(_unusable(url, e)) from None
    if rev is None:
        raise UserError(f"the database at {redact_url(url)} has no spotwise tables yet")
    if rev != head_revision():
        raise UserError(
            f"the database at {redact_url(url)} is at schema {rev}, this spotwise needs "
            f"{head_revision()}: restart the daemon, or run 'spotwise db upgrade'"
        )
    return engine


def _unusable(url: str, e: BaseException) -> str:
    first = str(getattr(e, "orig", e)).splitlines()[0] if str(e) else type(e).__name__
    return f"the database at {redact_url(url)} is not a spotwise database or is corrupted: {first}"


__all__ = ["Session", "make_engine", "open_db", "open_existing", "redact_url", "select", "upgrade"]
