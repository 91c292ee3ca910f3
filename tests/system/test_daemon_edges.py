"""The daemon in its first second and without its database: a SIGHUP right after start
(`systemctl reload` after `start`) never kills it and the reload runs once it is ready; a
database file deleted or replaced under it is noticed within a pass, said in one line, and
the daemon stops (systemd restarts it on the file at the path)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.system.test_e2e_local import Spotwise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _start(sw: Spotwise) -> subprocess.Popen[bytes]:
    log = (sw.home / "daemon.log").open("a")
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler", "daemon", "-c", str(sw.config)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait_up(sw: Spotwise, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + 60
    while sw.cli("status", ok=False)["rc"] != 0:
        assert proc.poll() is None, (sw.home / "daemon.log").read_text()[-3000:]
        assert time.monotonic() < end, "the daemon did not come up"
        time.sleep(0.1)


def _catches_sighup(pid: int) -> bool:
    """Whether the process has a SIGHUP handler (its first line of our code has run)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


@pytest.mark.parametrize("after", [0.0, 0.1, 0.2, 0.3])
def test_a_sighup_in_the_first_second_is_a_reload_not_a_death(tmp_path: Path, after: float):
    """`after` counts from the handler's installation, the first thing our package does:
    before it the interpreter itself is starting (tens of ms, more on a loaded machine) and no
    program can catch a signal; systemd holds a reload until a Type=notify unit is ready, so
    only a signal sent by hand can land there."""
    sw = Spotwise(tmp_path)
    proc = _start(sw)
    try:
        end = time.monotonic() + 30
        while not _catches_sighup(proc.pid):
            assert proc.poll() is None and time.monotonic() < end
            time.sleep(0.002)
        time.sleep(after)  # waiting on a real process's start-up, not a simulated event
        proc.send_signal(signal.SIGHUP)
        _wait_up(sw, proc)
        end = time.monotonic() + 30
        log = sw.home / "daemon.log"
        while "config reloaded" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < end, log.read_text()[-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_daemons_sighup_handler_comes_before_any_slow_import():
    """What makes the window above small: `spotwise daemon` catches SIGHUP as its package is
    first imported, before the config, the database or any cloud SDK is."""
    probe = (
        "import sys, signal; sys.argv = ['spotwise', 'daemon']; import scheduler; "
        "h = signal.getsignal(signal.SIGHUP); "
        "print(getattr(h, '__name__', h), sorted(m for m in ('sqlalchemy', 'pydantic', "
        "'boto3', 'torch', 'scheduler.daemon') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split(None, 1) == ["_remember", "[]\n"]


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_database_file_gone_from_under_the_daemon_stops_it(tmp_path: Path, how: str):
    sw = Spotwise(tmp_path)
    proc = _start(sw)
    try:
        _wait_up(sw, proc)
        db = sw.home / "spotwise.db"
        if how == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
        else:
            copy = sw.home / "other.db"
            shutil.copy(db, copy)
            os.replace(copy, db)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (sw.home / "daemon.log").read_text()
    assert code == 74, text[-3000:]
    # A deleted file may be noticed as deleted, or as replaced once a new connection of the
    # daemon's own has made a new, empty file at the path: both are no longer its database.
    said = ("was deleted", "was replaced") if how == "deleted" else ("was replaced",)
    (line,) = [x for x in text.splitlines() if any(s in x for s in said)]
    assert str(db) in line and "stopping" in line
