"""The CLI shows the configuration the daemon enforces, not its own file's.

Following the README, a person starts the daemon with deploy/spotwise.toml and runs
`spotwise budget` with no config: the same database, another file. The daemon records what
it runs with beside its heartbeat; budget, report, cost and status show that and say so.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler.core.config import parse_config
from scheduler.state.db import open_db
from scheduler.state.lease import DaemonRecord
from scheduler.state.read_models import running_config_text
from scheduler.state.running_config import changes, parse, record
from tests.support.cli_run import spotwise

DAEMON_CONFIG = """\
[daemon]
state_dir = "{state}"
teams = ["research", "vision"]

[providers.local]
speedup = 30

[[budgets]]
name = "research"
scope = "team:research"
limit_usd = 500
window = "month"
hard = true
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    """A database kept by a 'daemon' that runs with a $500 research budget, and the
    config a person's CLI reads: the same state directory, no budgets."""
    state = tmp_path / "state"
    daemon_cfg = tmp_path / "daemon.toml"
    daemon_cfg.write_text(DAEMON_CONFIG.format(state=state))
    own = tmp_path / "own.toml"
    own.write_text(f'[daemon]\nstate_dir = "{state}"\n')
    engine = open_db(f"sqlite:///{state / 'spotwise.db'}")
    config = parse_config(daemon_cfg.read_text(), str(daemon_cfg))
    DaemonRecord(engine, timedelta(minutes=1)).claim("test", record(config, daemon_cfg))
    engine.dispose()
    return daemon_cfg, own


@pytest.mark.slow
def test_budget_report_cost_and_status_show_the_daemons_budgets(setup):
    daemon_cfg, own = setup
    r = spotwise("budget", "-c", str(own))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "SCOPE", "KIND", "LIMIT"]
    assert lines[1].split()[:4] == ["research", "team:research", "hard", "$500.00/month"]
    warning = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert warning == [
        f"warning: showing the daemon's budgets, teams, speedup: it runs with "
        f"{daemon_cfg.resolve()}, this command read {own}"
    ]
    doc = json.loads(spotwise("budget", "-c", str(own), "-o", "json").stdout)
    assert [b["name"] for b in doc["budgets"]] == ["research"]
    report = json.loads(spotwise("report", "-c", str(own), "-o", "json").stdout)
    research = {r["team"]: r for r in report["rows"]}["research"]
    assert research["budgets"] == ["research"]  # "no budget" before: the CLI's own file
    for command in ("cost", "status"):
        r = spotwise(command, "-c", str(own))
        assert "warning: showing the daemon's budgets" in r.stderr, (command, r.stderr)
    # The daemon's own file: nothing differs, nothing said.
    r = spotwise("budget", "-c", str(daemon_cfg))
    assert r.returncode == 0 and "warning" not in r.stderr


def test_the_record_round_trips_and_masks_the_database_password(tmp_path):
    text = (
        '[daemon]\ndatabase_url = "postgresql://spot:hunter2@db/spotwise"\n'
        f'state_dir = "{tmp_path}"\n[[budgets]]\nname = "all"\nlimit_usd = 5\n'
    )
    config = parse_config(text, "x.toml")
    recorded = record(config, tmp_path / "x.toml")
    assert "hunter2" not in recorded
    back = parse(recorded)
    assert back is not None and back.path == str((tmp_path / "x.toml").resolve())
    assert [b.name for b in back.config.budgets] == ["all"]
    assert back.config.daemon.state_dir == tmp_path
    assert parse("") is None and parse('{"version": 99}') is None and parse("not json") is None


def test_the_daemon_records_its_config_and_logs_what_a_reload_changed(tmp_path, caplog):
    from scheduler.daemon.process import Daemon

    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(DAEMON_CONFIG.format(state=tmp_path / "state"))
    daemon = Daemon(cfg)
    try:
        from apscheduler.schedulers.background import BackgroundScheduler

        from scheduler.state.read_connection import open_for_reading

        daemon._scheduler = BackgroundScheduler()  # a reload reschedules (never started here)
        db = open_for_reading(daemon.config.daemon.resolved_database_url())
        first = parse(running_config_text(db))
        assert first is not None and [b.name for b in first.config.budgets] == ["research"]
        cfg.write_text(
            cfg.read_text().replace("limit_usd = 500", "limit_usd = 800")
            + '\n[[budgets]]\nname = "all"\nlimit_usd = 5000\n'
        )
        with caplog.at_level(logging.INFO, logger="spotwise.daemon"):
            daemon.reload()
        text = caplog.text
        assert "config reloaded from" in text and "2 change(s)" in text
        assert "config reloaded: budgets: added 'all'" in text
        assert "config reloaded: budgets['research'].limit_usd: 500.0 -> 800.0" in text
        now = parse(running_config_text(db))
        assert now is not None and {b.name: b.limit_usd for b in now.config.budgets} == {
            "research": 800.0,
            "all": 5000.0,
        }
    finally:
        assert daemon.lock is not None
        daemon.lock.release()
        daemon.engine.dispose()


def test_the_start_up_banner_names_what_the_daemon_runs_with(tmp_path, caplog):
    from scheduler.daemon.process import Daemon

    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(DAEMON_CONFIG.format(state=tmp_path / "state"))
    daemon = Daemon(cfg)
    try:
        with caplog.at_level(logging.INFO, logger="spotwise.daemon"):
            daemon._banner()
        text = caplog.text
        assert f"config {cfg}" in text and f"state directory {tmp_path / 'state'}" in text
        assert "providers: local (speedup 30x); teams: research, vision" in text
        assert "budgets: research (team:research, $500/month, hard)" in text
        assert "metrics: off" in text
    finally:
        assert daemon.lock is not None
        daemon.lock.release()
        daemon.engine.dispose()


def test_changes_name_each_setting_once():
    a = parse_config('[daemon]\nreconcile_interval = "5s"\n', "a")
    b = parse_config(
        '[daemon]\nreconcile_interval = "10s"\n[policy]\nrestart_overhead = "1m"\n', "b"
    )
    assert changes(a, b) == [
        'daemon.reconcile_interval: "PT5S" -> "PT10S"',
        'policy.restart_overhead: "PT3M" -> "PT1M"',
    ]
