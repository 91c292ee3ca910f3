"""Read commands never write: each one, run through the real `spotwise` console script
against a state directory that exists and against one that does not, leaves nothing under it
created or modified (paths, sizes and modification times compared before and after)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.core.config import local_settings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.read_settings import ReadSettings
from scheduler.state import read_models
from scheduler.state.files import load_config

pytestmark = pytest.mark.slow  # the real console script, twice per command

ROOT = Path(__file__).resolve().parents[2]
SPOTWISE = Path(sys.executable).with_name("spotwise")
READ_COMMANDS = (
    ("--version",),
    ("--help",),
    ("status",),
    ("status", "-o", "json"),
    ("show", "{job}"),
    ("logs", "{job}"),
    ("events",),
    ("prices", "--limit", "3"),
    ("budget",),
    ("cost",),
    ("report",),
    ("check-config",),
    ("user", "list"),
    ("token", "list"),
)


def _listing(root: Path, database_dir: Path) -> dict[str, tuple[object, ...]]:
    """Every path under `root`: files with their size and modification time, directories
    with theirs too, except the database's own directory's time (SQLite keeps its -wal and
    -shm files beside the database while a connection is open and removes them on close)."""
    if not root.exists():
        return {}
    found: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        kind = "dir" if path.is_dir() else "file"
        when = None if path == database_dir else st.st_mtime_ns
        found[str(path.relative_to(root))] = (kind, None if kind == "dir" else st.st_size, when)
    return found


def _run_all(tmp: Path, env: dict[str, str], job: str) -> list[str]:
    problems = []
    for args in READ_COMMANDS:
        argv = [str(SPOTWISE), *(a.format(job=job) for a in args)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp, timeout=120)
        if "Traceback" in proc.stderr:
            problems.append(f"{' '.join(args)}: {proc.stderr[-400:]}")
    return problems


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    if not SPOTWISE.is_file() or Path("/etc/spotwise/spotwise.toml").exists():
        pytest.skip("needs the installed console script and no system-wide config")
    monkeypatch.chdir(tmp_path)  # no ./spotwise.toml: the built-in defaults (local market)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    keep = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "SPOTWISE_CONFIG")}
    return {**keep, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}


def test_read_commands_write_nothing_to_an_existing_state_directory(tmp_path, env):
    from providers.local.market import LocalMarket
    from scheduler.state.db import open_db
    from scheduler.state.desired import submit

    cfg = load_config(None)
    state = cfg.daemon.resolved_state_dir()
    assert state.is_relative_to(tmp_path)
    # What a daemon leaves: its database, the local market's directory (epoch, market.json),
    # a job, and an attempt's output files.
    LocalMarket(local_settings(cfg))
    engine = open_db(cfg.daemon.resolved_database_url())
    spec = jobspec_from_dict({"name": "read-only", "command": ["train"]})
    job = submit(engine, spec, datetime.now(UTC), cfg.daemon.resolved_checkpoint_root())
    engine.dispose()
    logs = read_models.local_instance_dir(ReadSettings.of_config(cfg), "local-read-only-0001")
    logs.mkdir(parents=True)
    (logs / "stdout.log").write_text("step 1\n")
    before = _listing(state, state)
    assert "spotwise.db" in before and "local/epoch" in before
    assert _run_all(tmp_path, env, job.id) == []
    assert _listing(state, state) == before


def test_read_commands_create_no_state_directory(tmp_path, env):
    state = load_config(None).daemon.resolved_state_dir()
    assert not state.exists() and state.is_relative_to(tmp_path / "xdg")
    assert _run_all(tmp_path, env, "j-none") == []
    assert not (tmp_path / "xdg").exists()
