"""Database engine and schema: SQLite in WAL mode by default, PostgreSQL (psycopg 3) by URL.

WAL lets the CLI read while the daemon writes; busy_timeout makes short write contention wait
instead of failing. The schema is managed by Alembic (scheduler/state/migrations) on both: the
daemon upgrades on start (on PostgreSQL under an advisory lock, so two replicas starting together do
not both migrate); read commands never create or change a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from providers.masking import mask_url_passwords
from scheduler.core.errors import UserError
from scheduler.state.paths import creatable
from scheduler.state.revisions import LEGACY_REVISION, MIGRATIONS, head_revision

MIGRATION_LOCK = 0x5707_0001  # pg_advisory_lock key held while migrating


def redact_url(url: str) -> str:
    """The URL with any password replaced, for every message a person may read (the one
    masker's URL rule, providers/masking.py)."""
    return mask_url_passwords(url)


def sqlite_path(url: str) -> Path | None:
    made = sa.engine.make_url(url)
    if made.get_backend_name() != "sqlite" or not made.database or made.database == ":memory:":
        return None
    return Path(made.database)


def is_postgres(url: str) -> bool:
    try:
        return sa.engine.make_url(url).get_backend_name() == "postgresql"
    except sa.exc.ArgumentError:
        return False


def database_url_problem(url: str) -> str | None:
    """Why the engine cannot open `url` (None: it can), without connecting: the URL must
    parse, name SQLite or PostgreSQL, and (for SQLite) a file whose folder can exist."""
    try:
        made = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # a port that is no number: ValueError
        return f"{redact_url(url)!r} is not a database URL (sqlite:////path.db, postgresql://...)"
    backend = made.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        return f"{redact_url(url)!r}: {backend} is not supported; use SQLite or PostgreSQL"
    if backend == "sqlite":
        try:
            path = sqlite_path(url)
        except sa.exc.ArgumentError as e:
            return f"{redact_url(url)!r} is not a database URL: {e}"
        if path is not None and not path.is_absolute():
            return f"{redact_url(url)!r} names a relative file; use sqlite:////absolute/path.db"
        if path is not None:
            why = creatable(path.parent)
            if why is not None:
                return f"the database's folder: {why}"
    else:
        try:
            made.get_dialect()
        except Exception as e:  # a driver that is not installed, or unknown
            return f"{redact_url(url)!r} is not usable: {e}"
    return None


def make_engine(
    url: str,
    *,
    create_dir: bool = False,
    pg_settings: Mapping[str, int] | None = None,
    application_name: str | None = None,
) -> Engine:
    """The engine for `url`; `pg_settings` are PostgreSQL session settings (milliseconds for
    the timeouts) applied to every connection, e.g. the lease's statement_timeout, and
    `application_name` names its sessions (a standby ends an expired holder's by it)."""
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
    made = sa.engine.make_url(url)
    connect_args: dict[str, object] = {}
    if made.get_backend_name() == "postgresql":
        if made.drivername in ("postgresql", "postgres"):
            made = made.set(drivername="postgresql+psycopg")  # psycopg 3, the [postgres] extra
        if made.drivername == "postgresql+psycopg":
            try:
                import psycopg  # noqa: F401
            except ModuleNotFoundError:
                raise UserError(
                    f"database_url {redact_url(url)!r} needs psycopg 3: "
                    "pip install 'spotwise[postgres]'"
                ) from None
        options = " ".join(f"-c {k}={int(v)}" for k, v in (pg_settings or {}).items())
        if options:
            connect_args["options"] = options
        if application_name:
            connect_args["application_name"] = application_name
        connect_args.setdefault("connect_timeout", 10)
    try:
        return sa.create_engine(made, pool_pre_ping=True, connect_args=connect_args)
    except (sa.exc.ArgumentError, ModuleNotFoundError) as e:
        raise UserError(f"database_url {redact_url(url)!r} is not usable: {e}") from None


def _alembic_config(connection: sa.Connection):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision; LEGACY_REVISION for a 0.1 database; None if empty."""
    with engine.connect() as c:
        return _revision_on(c)


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to head (the daemon on start, `spotwise db upgrade`). Returns
    (from, to). A 0.1 database is stamped at its revision first, then upgraded."""
    before = current_revision(engine)
    head = head_revision()
    if before == head:
        return before, head
    _check_known(before)
    with engine.connect() as conn:
        if conn.dialect.name != "postgresql":
            _migrate(conn, before)
            return before, head
        # Two replicas starting together: the second waits here, then finds it done.
        conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
        conn.commit()
        try:
            before = _revision_on(conn)
            conn.commit()
            _check_known(before)
            if before != head:
                _migrate(conn, before)
        finally:
            conn.rollback()
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
            conn.commit()
    return before, head


def _migrate(conn: sa.Connection, before: str | None) -> None:
    from alembic import command

    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        # Batch migrations rebuild tables that others reference: foreign keys are checked
        # again once the schema is whole (the pragma is a no-op inside a transaction).
        conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
    cfg = _alembic_config(conn)
    if before == LEGACY_REVISION and "alembic_version" not in sa.inspect(conn).get_table_names():
        command.stamp(cfg, LEGACY_REVISION)
    command.upgrade(cfg, "head")
    conn.commit()
    if sqlite:
        conn.exec_driver_sql("PRAGMA foreign_keys=ON")


def _revision_on(conn: sa.Connection) -> str | None:
    tables = set(sa.inspect(conn).get_table_names())
    if "alembic_version" in tables:
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return LEGACY_REVISION if "job" in tables else None


def _check_known(revision: str | None) -> None:
    if revision is not None and revision not in _known_revisions():
        raise UserError(
            f"the database schema is at revision {revision}, which this spotwise does not know "
            "(it is newer): upgrade spotwise"
        )


def _known_revisions() -> set[str]:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return {s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()}


def open_db(
    url: str,
    pg_settings: Mapping[str, int] | None = None,
    application_name: str | None = None,
) -> Engine:
    """For the daemon: create the database if needed and bring its schema to head. A server
    that cannot be reached is a DatabaseUnreachable (exit 1: systemd tries again), not a
    user error."""
    engine = make_engine(
        url, create_dir=True, pg_settings=pg_settings, application_name=application_name
    )
    try:
        upgrade(engine)
    except sa.exc.OperationalError as e:
        if is_postgres(url):
            raise DatabaseUnreachable(_unreachable(url, e)) from None
        raise UserError(_unusable(url, e)) from None
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
    except sa.exc.OperationalError as e:
        if is_postgres(url):
            raise DatabaseUnreachable(_unreachable(url, e)) from None
        raise UserError(_unusable(url, e)) from None
    except sa.exc.DatabaseError as e:
        raise UserError(_unusable(url, e)) from None
    if rev is None:
        hint = " (run 'spotwise db upgrade' or start the daemon)" if is_postgres(url) else ""
        raise UserError(f"the database at {redact_url(url)} has no spotwise tables yet{hint}")
    if rev != head_revision():
        raise UserError(
            f"the database at {redact_url(url)} is at schema {rev}, this spotwise needs "
            f"{head_revision()}: restart the daemon, or run 'spotwise db upgrade'"
        )
    return engine


class DatabaseUnreachable(UserError):
    """The database server did not answer: not the user's file, so not exit 2."""

    exit_code = 1


def _unreachable(url: str, e: BaseException) -> str:
    first = str(getattr(e, "orig", e)).strip().splitlines()
    return f"cannot reach the database at {redact_url(url)}: {first[0] if first else e}"


def _unusable(url: str, e: BaseException) -> str:
    first = str(getattr(e, "orig", e)).splitlines()[0] if str(e) else type(e).__name__
    return f"the database at {redact_url(url)} is not a spotwise database or is corrupted: {first}"


__all__ = ["Session", "make_engine", "open_db", "open_existing", "redact_url", "select", "upgrade"]
