"""Administration: `spotwise check-config` (validate a config or job file), `db upgrade`,
`db current` and `db backup` (the schema's Alembic migrations, and a consistent copy of a
SQLite database while the daemon runs) and `service install` (the daemon as a systemd
service).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scheduler.cli.common import (
    ConfigOpt,
    Format,
    OutputOpt,
    print_err,
    print_json,
    print_out,
    remember_database_urls,
)

commands = typer.Typer()
db_app = typer.Typer(
    help="The database: schema (Alembic migrations), current revision, backup.",
    no_args_is_help=True,
)
commands.add_typer(db_app, name="db")
service_app = typer.Typer(help="Run the daemon as a systemd service.", no_args_is_help=True)
commands.add_typer(service_app, name="service")


@commands.command("check-config")
def check_config(
    file: Annotated[Path | None, typer.Argument(help="Config file to validate")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """Validate a config file; exit 2 with one message per problem."""
    from scheduler.state import read_models
    from scheduler.state.files import load_config

    path = file or config
    if path is not None and _looks_like_a_job(path):
        _check_job_file(path, output)
        return
    cfg = load_config(path)
    providers = [
        n for n in ("local", "aws", "gcp", "azure") if getattr(cfg.providers, n) is not None
    ]
    if output == "json":
        print_json(
            read_models.document(
                ok=True,
                file=str(path) if path else None,
                providers=providers,
                budgets=[b.name for b in cfg.budgets],
                database_url=cfg.daemon.masked_database_url(),
                state_dir=str(cfg.daemon.resolved_state_dir()),
            )
        )
        return
    print_out(
        f"ok {path or 'built-in defaults'}: providers {', '.join(providers) or 'none'}; "
        f"{len(cfg.budgets)} budget(s); database {cfg.daemon.masked_database_url()}"
    )
    if not providers:
        print_err("warning: no provider configured: the daemon places nothing until one is")


_CONFIG_SECTIONS = {"daemon", "providers", "budgets", "policy"}
_JOB_KEYS = {"command", "gpus", "gpu_hours", "nodes", "spot", "deadline"}


def _looks_like_a_job(path: Path) -> bool:
    """A TOML file with a job's top-level keys and no config section is a job file, checked
    as `submit` checks one (rather than reported as a config full of unknown keys)."""
    import tomllib

    try:
        if path.stat().st_size > 1_000_000:
            return False
        data = tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
    except Exception:  # unreadable, not TOML, nested too deeply: load_config says which
        return False
    return not (_CONFIG_SECTIONS & set(data)) and bool(_JOB_KEYS & set(data))


def _check_job_file(path: Path, output: Format) -> None:
    from scheduler.state import read_models
    from scheduler.state.files import load_jobspec

    spec = load_jobspec(path)
    if output == "json":
        print_json(
            read_models.document(
                ok=True, file=str(path), kind="job", job=spec.model_dump(mode="json")
            )
        )
        return
    print_out(
        f"ok {path}: a job file ({spec.name}, team {spec.team}, gpus {' or '.join(spec.gpus)}); "
        f"see its plan with: spotwise submit --dry-run {path}",
        soft_wrap=True,
    )


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Bring the database schema to this version (the daemon also does it on start)."""
    from scheduler.state.db import make_engine, redact_url, upgrade
    from scheduler.state.files import load_config

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    remember_database_urls()
    before, after = upgrade(make_engine(url, create_dir=True))
    where = redact_url(url)
    if before == after:
        print_out(f"{where}: schema already at {after}")
    else:
        print_out(f"{where}: schema {before or 'empty'} -> {after}")


@db_app.command("current")
def db_current(config: ConfigOpt = None) -> None:
    """The database's schema revision and the one this spotwise needs; exit 1 if they
    differ (reads only)."""
    from scheduler.state.db import redact_url
    from scheduler.state.files import load_config
    from scheduler.state.revisions import head_revision

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    rev = _revision_of(url)
    head = head_revision()
    where = redact_url(url)
    if rev == head:
        print_out(f"{where}: schema {rev} (what this spotwise needs)")
        return
    if rev is None:
        print_out(
            f"{where}: no spotwise tables yet; this spotwise needs {head} "
            "(spotwise db upgrade, or start the daemon)"
        )
    else:
        print_out(f"{where}: schema {rev}; this spotwise needs {head} (spotwise db upgrade)")
    raise typer.Exit(1)


def _revision_of(url: str) -> str | None:
    """The schema revision of the database at `url`, read without writing (sqlite3 in
    query-only mode for a SQLite file)."""
    from scheduler.core.errors import UserError
    from scheduler.state.read_connection import SqliteFile, _revision, reading, sqlite_file

    path = sqlite_file(url)
    if path is not None:
        if not path.exists():
            raise UserError(f"no spotwise database at {path}: start the daemon first")
        with reading(SqliteFile(url, path)) as query:
            return _revision(query)
    from scheduler.state.db import current_revision, make_engine

    remember_database_urls()
    return current_revision(make_engine(url))


@db_app.command("backup")
def db_backup(
    dest: Annotated[
        Path | None,
        typer.Argument(
            metavar="FILE",
            help="Where to write the copy (default: ./spotwise-backup-<UTC time>.db)",
        ),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """A consistent copy of the SQLite database, safe while the daemon runs (SQLite's
    online backup); for PostgreSQL, how to take one with pg_dump."""
    import sqlite3
    from datetime import UTC, datetime

    from scheduler.core.errors import UserError
    from scheduler.state.db import redact_url
    from scheduler.state.files import load_config
    from scheduler.state.read_connection import sqlite_file

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    path = sqlite_file(url)
    if path is None:
        raise UserError(
            f"the database at {redact_url(url)} is not a SQLite file: back it up with the "
            "server's own tool, e.g. pg_dump --format=custom --file=spotwise.dump "
            "'<database_url without +psycopg>' (pg_restore puts it back)"
        )
    if not path.exists():
        raise UserError(f"no spotwise database at {path}: nothing to back up")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = dest or Path(f"spotwise-backup-{stamp}.db")
    if target.exists():
        raise UserError(f"{target} already exists: give another file (a backup never overwrites)")
    partial = target.with_name(f".{target.name}.partial")
    source = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True, timeout=30)
    source.execute("PRAGMA query_only = ON")  # read: no -wal or -shm left behind (mode=ro would)
    try:
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy)  # page by page, consistent while the daemon writes
            ok = copy.execute("PRAGMA quick_check").fetchone()[0]
            jobs = copy.execute("SELECT count(*) FROM job").fetchone()[0]
            rev = copy.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        finally:
            copy.close()
    except (sqlite3.Error, OSError) as e:
        partial.unlink(missing_ok=True)
        raise UserError(f"backup of {path} to {target} failed: {e}") from None
    finally:
        source.close()
    if ok != "ok":
        partial.unlink(missing_ok=True)
        raise UserError(f"the copy of {path} failed its check ({ok}); nothing was written")
    partial.replace(target)
    size = target.stat().st_size / 1e6
    print_out(
        f"backed up {path} (schema {rev}, {jobs} jobs, {size:.1f} MB) to {target}", soft_wrap=True
    )


@service_app.command("install")
def service_install(
    root: Annotated[
        Path | None,
        typer.Option(help="Stage into this directory; commands are recorded, not run"),
    ] = None,
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="Remove the unit (config and state are kept)")
    ] = False,
) -> None:
    """User, venv, config, unit and tmpfiles for the daemon; safe to run again."""
    from scheduler.daemon import service

    report = service.uninstall(root) if uninstall else service.install(root)
    for line in report.lines():
        print_out(line)
    if not uninstall and report.ran:
        print_out("next: systemctl enable --now spotwise")
        print_out("and for remote users: systemctl enable --now spotwise-server")
