"""One state directory, one daemon per database, a heartbeat the CLI reads, and a schema
that moves by migrations (a 0.1 database upgrades in place)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from scheduler.core.config import Config, DaemonSettings, default_state_dir, parse_config
from scheduler.core.errors import UserError
from scheduler.daemon.process import restart_only_changes
from scheduler.state.db import current_revision, head_revision, open_db, open_existing, redact_url
from scheduler.state.lease import DaemonRecord, StateLock, read_heartbeat
from scheduler.state.models import DaemonLease


def test_state_dir_under_systemd_else_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "svc"))
    assert default_state_dir() == tmp_path / "svc"
    d = DaemonSettings()
    assert d.resolved_database_url() == f"sqlite:///{tmp_path / 'svc' / 'spotwise.db'}"
    assert d.resolved_checkpoint_root() == (tmp_path / "svc" / "checkpoints").as_uri()
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "spotwise"
    d = DaemonSettings(state_dir=tmp_path / "mine")
    assert d.resolved_database_url().endswith("/mine/spotwise.db")


def test_a_second_daemon_on_the_same_state_refuses(tmp_path):
    first = StateLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(UserError, match=rf"another spotwise daemon \(pid {os.getpid()}\)"):
            StateLock(tmp_path).acquire()
    finally:
        first.release()
    StateLock(tmp_path).acquire()  # released: the next one may start


def test_a_daemon_on_another_host_with_a_fresh_heartbeat_is_refused(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path}/db.sqlite")
    a = DaemonRecord(engine, stale_after=timedelta(minutes=1))
    a.claim("test")
    a.beat("1 running, 0 pending, $0.90/h")
    with Session(engine) as s:
        row = s.get(DaemonLease, "daemon")
        row.host = "other-host"  # as if another machine held it
        s.add(row)
        s.commit()
    with pytest.raises(UserError, match=r"another spotwise daemon .* on other-host"):
        DaemonRecord(engine, stale_after=timedelta(minutes=1)).claim("test")
    hb = read_heartbeat(engine)
    assert hb is not None and hb.status.startswith("1 running")


@pytest.mark.slow
def test_the_cli_never_creates_a_database(tmp_path):
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\ncommand = ["true"]\ngpus = "V100:1"\n')
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "submit", str(job), "-c", str(cfg)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no spotwise database" in r.stderr and "start the daemon" in r.stderr
    assert not (tmp_path / "state" / "spotwise.db").exists()


@pytest.mark.slow
def test_status_warns_and_fails_when_the_daemon_is_not_running(tmp_path):
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    open_db(f"sqlite:///{tmp_path}/spotwise.db")  # a database, but no daemon has run
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "status", "-c", str(cfg), "-o", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 3
    assert "no spotwise daemon has run" in json.loads(r.stdout)["daemon_warning"]


def test_passwords_never_printed():
    url = "postgresql+psycopg://spot:s3cret-pw@db.example:5432/spotwise"
    assert "s3cret-pw" not in redact_url(url) and "***" in redact_url(url)
    with pytest.raises(UserError) as e:
        open_existing("postgresql+nosuchdriver://spot:s3cret-pw@localhost/x")
    assert "s3cret-pw" not in str(e.value)


def test_reload_refuses_keys_that_need_a_restart(tmp_path):
    old = parse_config(f'[daemon]\nstate_dir = "{tmp_path}/a"\n')
    new = parse_config(f'[daemon]\nstate_dir = "{tmp_path}/b"\nreconcile_interval = "9s"\n')
    assert restart_only_changes(old, new) == ["daemon.state_dir"]
    same = parse_config(f'[daemon]\nstate_dir = "{tmp_path}/a"\nreconcile_interval = "9s"\n')
    assert restart_only_changes(old, same) == []
    moved = parse_config(f'[daemon]\nstate_dir = "{tmp_path}/a"\ndatabase_url = "sqlite:///x.db"\n')
    assert "daemon.database_url" in restart_only_changes(old, moved)
    assert isinstance(old, Config)


def _legacy_database(path: Path) -> None:
    """A database as spotwise 0.1 left it: revision 0001's tables, no alembic_version, data."""
    from alembic import command

    from scheduler.state.db import _alembic_config

    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0001")
        conn.exec_driver_sql("DROP TABLE alembic_version")
        conn.exec_driver_sql(
            "INSERT INTO job (id, name, team, spec_json, state, reason, checkpoint_uri, "
            "created_at, updated_at, cancel_requested, attempts, recoveries, cost_usd) VALUES "
            "('j-old', 'old', 'default', '{}', 'SUCCEEDED', 'finished', 'file:///x', "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00', 0, 1, 0, 1.5)"
        )
        conn.exec_driver_sql(
            "INSERT INTO attempt (id, job_id, number, token, provider, cloud, region, zone, "
            "instance_type, market, pool, price_per_hour, gpu_count, state, instance_id, "
            "created_at, started_at, ended_at, end_reason, cost_usd) VALUES ('j-old-a1', "
            "'j-old', 1, 'spotwise-j-old-a1', 'local', 'aws', 'us-east-1', 'us-east-1a', "
            "'p3.2xlarge', 'spot', 'aws/us-east-1a/p3.2xlarge/spot', 1.5, 1, 'ENDED', 'i-1', "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 01:00:00', "
            "'finished', 1.5)"
        )
        conn.exec_driver_sql("INSERT INTO schemaversion (id, version) VALUES (1, 1)")


def test_a_0_1_database_is_migrated_in_place(tmp_path):
    db = tmp_path / "old.db"
    _legacy_database(db)
    url = f"sqlite:///{db}"
    engine = sa.create_engine(url)
    assert current_revision(engine) == "0001"
    with pytest.raises(UserError, match="spotwise db upgrade"):
        open_existing(url)  # read commands never migrate
    engine = open_db(url)  # the daemon does
    assert current_revision(engine) == head_revision()
    rows = sqlite3.connect(db).execute("SELECT id, cost_usd, failures FROM job").fetchall()
    assert rows == [("j-old", 1.5, 0)]
    # Spend accrued under 0.1 is kept once: not charged again, and counted by budgets.
    from scheduler.core.clock import SimClock
    from scheduler.core.config import BudgetSettings
    from scheduler.daemon.reconcile import Reconciler

    cfg = Config(
        daemon=DaemonSettings(database_url=url, state_dir=tmp_path),
        budgets=[BudgetSettings(name="all", limit_usd=100, window="total")],
    )
    Reconciler(engine, cfg, {}, SimClock()).accrue()
    con = sqlite3.connect(db)
    assert con.execute("SELECT cost_usd FROM attempt").fetchall() == [(1.5,)]
    assert con.execute("SELECT SUM(usd) FROM spendbucket").fetchone() == (1.5,)
    assert con.execute("SELECT spent_usd FROM budgetspend").fetchone() == (1.5,)
    tables = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}
    assert "schemaversion" not in tables and {"spendbucket", "daemonlease"} <= tables


def test_the_head_read_from_the_migration_files_is_alembics():
    """`head_revision` parses the files (the CLI avoids importing Alembic): the same answer."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    from scheduler.state.db import MIGRATIONS

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert head_revision() == ScriptDirectory.from_config(cfg).get_current_head()


@pytest.mark.slow
def test_status_does_not_import_alembic_or_the_daemon(tmp_path):
    """Every CLI start pays for what it imports: `status` needs neither the migrations
    machinery nor the controllers and simulator that `bench` pulls in."""
    import subprocess
    import sys

    db = tmp_path / "s.db"
    open_db(f"sqlite:///{db}")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\ndatabase_url = "sqlite:///{db}"\n')
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['spotwise', 'status', '-o', 'json', '-c', {str(cfg)!r}]\n"
        "try:\n    runpy.run_module('scheduler', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "loaded = [m for m in ('alembic', 'scheduler.daemon.reconcile', 'scheduler.lab.bench') "
        "if m in sys.modules]\n"
        "print('LOADED', loaded)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert '"jobs": []' in r.stdout, r.stderr
    assert "LOADED []" in r.stdout, r.stdout[-300:]
