"""The schema on PostgreSQL is Alembic's, the same as on SQLite; the CLI works against it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

from scheduler.core.errors import UserError
from scheduler.state import read_models
from scheduler.state.db import current_revision, head_revision, make_engine, open_db, upgrade

pytestmark = pytest.mark.timeout(120)


def _cli(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args, "-c", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _config(tmp_path: Path, url: str) -> Path:
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\ndatabase_url = "{url}"\n'
        f'[providers.local]\nstate_dir = "{tmp_path / "market"}"\n'
    )
    return cfg


def test_migrations_reach_head_and_match_the_models(pg_url):
    engine = make_engine(pg_url)
    assert current_revision(engine) is None
    assert upgrade(engine) == (None, head_revision())
    assert current_revision(engine) == head_revision()
    with engine.connect() as c:
        diff = compare_metadata(
            MigrationContext.configure(c, opts={"compare_type": True}), SQLModel.metadata
        )
    assert diff == []  # the migrations build exactly what the models declare
    assert upgrade(engine) == (head_revision(), head_revision())  # a second run is a no-op


def test_two_replicas_upgrading_at_once_both_succeed(pg_url):
    results: list[object] = []

    def one() -> None:
        try:
            results.append(upgrade(make_engine(pg_url)))
        except Exception as e:  # pragma: no cover - the assertion shows it
            results.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(r, tuple) and r[1] == head_revision() for r in results), results
    assert sorted(r[0] or "" for r in results) in (["", head_revision()], ["", ""])  # type: ignore[index]


def test_db_upgrade_command_and_a_plain_postgresql_url(tmp_path, pg_url):
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")  # psycopg 3 is chosen
    cfg = _config(tmp_path, plain)
    r = _cli("db", "upgrade", config=cfg)
    assert r.returncode == 0, r.stderr
    assert f"schema empty -> {head_revision()}" in r.stdout
    r = _cli("db", "upgrade", config=cfg)
    assert r.returncode == 0 and f"already at {head_revision()}" in r.stdout


def test_submit_and_status_against_postgresql(tmp_path, pg_url):
    cfg = _config(tmp_path, pg_url)
    job = tmp_path / "job.toml"
    job.write_text('name = "pg-job"\ncommand = ["true"]\ngpus = "V100:1"\n')
    r = _cli("submit", str(job), config=cfg)
    assert r.returncode == 2 and "no spotwise tables yet" in r.stderr  # never creates one
    open_db(pg_url)
    r = _cli("submit", str(job), "-o", "json", config=cfg)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["id"]
    r = _cli("status", "-o", "json", config=cfg)
    doc = json.loads(r.stdout)
    assert [(j["id"], j["name"], j["state"]) for j in doc["jobs"]] == [
        (job_id, "pg-job", "PENDING")
    ]
    assert r.returncode == 3 and doc["daemon"] is None  # no daemon yet: said, and exit 3
    assert "no spotwise daemon has run" in doc["daemon_warning"]
    # PostgreSQL returns datetimes, not SQLite's text: the times still read as json_default's.
    engine = make_engine(pg_url)
    rows = read_models.job_rows(engine)
    assert rows[0]["created_at"].tzinfo is not None
    assert json.loads(json.dumps(rows, default=read_models.json_default)) == doc["jobs"]
    assert read_models.job_rows(engine, iso_times=True) == doc["jobs"]


def test_an_unreachable_server_is_one_line(tmp_path, pg_url):
    url = sa.engine.make_url(pg_url).set(port=1, password="s3cret")
    cfg = _config(tmp_path, url.render_as_string(hide_password=False))
    r = _cli("status", config=cfg)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: cannot reach the database at postgresql+psycopg://")
    assert "Traceback" not in r.stderr and "s3cret" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_missing_database_is_a_user_error(pg_url):
    url = sa.engine.make_url(pg_url).set(database="no_such_db")
    with pytest.raises(UserError, match="no_such_db"):
        open_db(url.render_as_string(hide_password=False))
