"""The read commands trust what the daemon validated, and nothing else.

`status` and `show` used to validate the config on every run (pydantic and every cloud's
settings: most of their cost). When the daemon keeping the database validated these very
bytes with this very spotwise, they now read the values they need from its record, without
pydantic; an edited file, another file or a bad one takes the validating path, so a read
command and `check-config` still refuse alike. The real command line, real files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler.state.db import open_db
from scheduler.state.files import load_config_source
from scheduler.state.lease import DaemonRecord
from scheduler.state.running_config import record
from tests.support.cli_run import env

# What the command imported, and how many objects its start-up froze, printed after it ran
# (it writes its own output first). ENTRY: app.run, as the console script calls it, or main.
_PROBE = (
    "import gc, sys\n"
    "from scheduler.cli.app import ENTRY as entry\n"
    "sys.argv = ['spotwise', *sys.argv[1:]]\n"
    "try:\n"
    "    entry()\n"
    "except SystemExit as e:\n"
    "    code = e.code\n"
    "else:\n"
    "    code = 0\n"
    "heavy = [m for m in ('pydantic', 'rich', 'sqlalchemy') if m in sys.modules]\n"
    "print('IMPORTED', ','.join(heavy) or '-', code, gc.get_freeze_count(), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _run(*args: str, entry: str = "run") -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The command's output, and which heavy libraries it imported; its exit status is
    the process's."""
    r, heavy, _ = _probe(*args, entry=entry)
    return r, heavy


def _probe(*args: str, entry: str) -> tuple[subprocess.CompletedProcess[str], set[str], int]:
    r = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("ENTRY", entry), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    last = [line for line in r.stderr.splitlines() if line.startswith("IMPORTED ")][-1]
    heavy, frozen = last.split()[1], int(last.split()[3])
    return r, set() if heavy == "-" else set(heavy.split(",")), frozen


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    """A config file and a database whose 'daemon' validated that file and recorded it, as
    `spotwise daemon` does at start and on every reload."""
    state = tmp_path / "state"
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{state}"\n\n[providers.local]\nspeedup = 30\n')
    config, digest = load_config_source(cfg)
    engine = open_db(config.daemon.resolved_database_url())
    from scheduler.state.installed import version

    DaemonRecord(engine, timedelta(minutes=1)).claim(version(), record(config, cfg, digest))
    engine.dispose()
    # The market's time origin, as a running market leaves it (times then read the same).
    (state / "local").mkdir(parents=True)
    (state / "local" / "epoch").write_text(datetime.now(UTC).isoformat())
    return cfg


def test_a_file_the_daemon_validated_is_not_validated_again(kept: Path) -> None:
    r, heavy = _run("status", "-c", str(kept))
    assert r.returncode == 0 and heavy == set(), r.stderr
    # The record's values are the daemon's: its sped-up market's clock.
    assert "local market at 30x" in r.stderr
    r, heavy = _run("status", "-o", "json", "-c", str(kept))
    assert json.loads(r.stdout)["jobs"] == [] and "pydantic" not in heavy


def test_the_console_script_freezes_its_start_up_and_main_in_another_process_does_not(
    kept: Path,
) -> None:
    """The console script (app.run) freezes what its start-up made (the collections skip
    it); the tests' in-process main() must not (their process keeps collecting). Both
    leave the state directory as they found it: nothing the command opened stays open."""
    state = kept.parent / "state"
    before = sorted(p.name for p in state.iterdir())
    for entry, frozen in (("run", True), ("main", False)):
        r, _, count = _probe("status", "-o", "json", "-c", str(kept), entry=entry)
        assert r.returncode == 0 and json.loads(r.stdout)["jobs"] == [], r.stderr
        assert (count > 10_000) is frozen and (count == 0) is not frozen, (entry, count)
        assert sorted(p.name for p in state.iterdir()) == before  # no -wal or -shm left


def test_an_edited_file_is_validated_and_a_bad_one_refused_as_check_config_does(
    kept: Path,
) -> None:
    kept.write_text(kept.read_text() + "# a comment: other bytes, the same config\n")
    r, heavy = _run("status", "-c", str(kept))
    assert r.returncode == 0 and "pydantic" in heavy, r.stderr
    assert "local market at 30x" in r.stderr
    kept.write_text(kept.read_text().replace("speedup = 30", "speedup = 30\nspeed = 2"))
    r, _ = _run("status", "-c", str(kept))
    check = subprocess.run(
        [sys.executable, "-m", "scheduler", "check-config", "-c", str(kept)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 2 and check.returncode == 2
    assert "providers.local.speed (line 6)" in line and line in check.stderr


def test_another_spotwise_s_record_is_not_trusted(kept: Path) -> None:
    url = f"sqlite:///{kept.parent / 'state' / 'spotwise.db'}"
    engine = open_db(url)
    with engine.begin() as c:
        text = c.exec_driver_sql("SELECT config_json FROM daemonlease").scalar_one()
        doc = json.loads(text)
        doc["spotwise"] = "0.0.1"
        c.exec_driver_sql("UPDATE daemonlease SET config_json = ?", (json.dumps(doc),))
    engine.dispose()
    r, heavy = _run("status", "-c", str(kept))
    assert r.returncode == 0 and "pydantic" in heavy, r.stderr


def test_show_prints_the_same_either_way_and_without_rich_when_piped(kept: Path) -> None:
    job = kept.parent / "job.toml"
    job.write_text(
        'name = "vouched"\ngpus = "V100:1"\ngpu_hours = 1\ncommand = ["python", "-c", "pass"]\n'
    )
    r, _ = _run("submit", str(job), "-o", "json", "-c", str(kept))
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["id"]
    fast, heavy = _run("show", job_id, "-c", str(kept))
    assert fast.returncode == 0 and heavy == set(), fast.stderr
    kept.write_text(kept.read_text() + "\n")  # other bytes: validated again
    slow, heavy = _run("show", job_id, "-c", str(kept))
    assert slow.returncode == 0 and "pydantic" in heavy, slow.stderr
    assert fast.stdout == slow.stdout and job_id in fast.stdout


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reconcile_interval_s", float("inf")),
        ("reconcile_interval_s", True),
        ("local_speedup", float("nan")),
        ("local_state_dir", "/tmp/state\x00edited"),
    ],
)
def test_a_record_edited_past_what_the_config_allows_vouches_for_nothing(
    kept: Path, key: str, value: object
) -> None:
    """The record's values are trusted only as the config's validation would allow them
    (JSON reads Infinity and NaN; no path holds a NUL): anything else takes the validating
    path, which reads the operator's file, not the record."""
    url = f"sqlite:///{kept.parent / 'state' / 'spotwise.db'}"
    engine = open_db(url)
    with engine.begin() as c:
        text = c.exec_driver_sql("SELECT config_json FROM daemonlease").scalar_one()
        doc = json.loads(text)
        doc["read"][key] = value
        c.exec_driver_sql("UPDATE daemonlease SET config_json = ?", (json.dumps(doc),))
    engine.dispose()
    r, heavy = _run("status", "-c", str(kept))
    assert r.returncode == 0 and "pydantic" in heavy, r.stderr
    assert "local market at 30x" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "text",
    ["n = " + "9" * 5000 + "\n", "a = " + "[" * 2000 + "]" * 2000 + "\n"],
    ids=["a 5000-digit integer", "nested 2000 deep"],
)
def test_a_config_the_fast_path_cannot_parse_is_one_error_line(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(text)
    r, _ = _run("status", "-c", str(cfg))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "not valid TOML" in line
