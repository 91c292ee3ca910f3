"""End to end on the local market: the real daemon process, real job processes, the real CLI.

One job is interrupted (notice, SIGTERM), recovered on another pool, resumed from its checkpoint
(not from zero), survives a daemon restart and a rejected config reload, and its costs add up.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from providers.local import LocalMarket, LocalSettings

COUNTER = Path(__file__).parents[1] / "support" / "jobs" / "counter.py"
pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_text(home: Path, port: int) -> str:
    return f"""
[daemon]
state_dir = "{home}"
database_url = "sqlite:///{home}/spotwise.db"
checkpoint_root = "{(home / "ckpt").as_uri()}"
reconcile_interval = "0.3s"
price_interval = "1s"
accrue_interval = "0.5s"
leak_grace = "1h"
metrics_port = {port}

[providers.local]
state_dir = "{home}/market"
speedup = 1
grace_period = "0.3s"
kill_after = "3s"
"""


class Spotwise:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.config = home / "spotwise.toml"
        self.metrics_port = free_port()
        self.config.write_text(config_text(home, self.metrics_port))
        self.daemon: subprocess.Popen | None = None

    def cli(self, *args: str, ok: bool = True) -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "scheduler", *args, "-c", str(self.config), "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if not ok:
            return {"rc": r.returncode, "stderr": r.stderr}
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def start(self) -> None:
        self.log = (self.home / "daemon.log").open("a")
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "daemon", "-c", str(self.config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        # The CLI never creates the database: wait until the daemon has, and beats.
        end = time.monotonic() + 60
        while self.cli("status", ok=False)["rc"] != 0:
            assert self.daemon.poll() is None, (self.home / "daemon.log").read_text()
            assert time.monotonic() < end, "the daemon did not come up"
            time.sleep(0.2)

    def stop(self) -> int:
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGTERM)
        return self.daemon.wait(timeout=30)

    def wait_job(self, job_id: str, pred, timeout: float = 60) -> dict:
        end = time.monotonic() + timeout
        row: dict = {}
        while time.monotonic() < end:
            rows = {r["id"]: r for r in self.cli("status")["jobs"]}
            row = rows[job_id]
            if pred(row):
                return row
            assert self.daemon.poll() is None, (self.home / "daemon.log").read_text()
            time.sleep(0.2)
        raise AssertionError(f"timed out; last row {row}\n{(self.home / 'daemon.log').read_text()}")


def test_interrupt_migrate_resume_restart(tmp_path):
    sw = Spotwise(tmp_path)
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        # 40 s of work: under CI load each `status` call here takes seconds, and the job must
        # still be running after the move and across the daemon restart below.
        f'name = "counter"\ncommand = ["{sys.executable}", "{COUNTER}", "400", "0.1"]\n'
        'gpus = "V100:1"\ngpu_hours = 1\n'
    )
    sw.start()
    try:
        job_id = sw.cli("submit", str(job_file))["id"]
        row = sw.wait_job(
            job_id, lambda r: r["state"] == "RUNNING" and (r["progress_step"] or 0) >= 8
        )
        first_pool = f"{row['cloud']}/{row['zone']}/{row['instance_type']}/{row['market']}"

        # A bad config sent with SIGHUP is rejected; the daemon keeps running on the old one.
        good = sw.config.read_text()
        sw.config.write_text(good + "\n[daemon.bogus]\n")
        os.kill(sw.daemon.pid, signal.SIGHUP)
        time.sleep(1)
        assert sw.daemon.poll() is None
        sw.config.write_text(good)
        os.kill(sw.daemon.pid, signal.SIGHUP)  # a valid file is taken

        # The cloud takes the instance back: notice, then SIGTERM; the job checkpoints, exits 75.
        market = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1))
        assert market.interrupt(row["instance_id"])
        row = sw.wait_job(job_id, lambda r: r["recoveries"] == 1 and r["state"] == "RUNNING")
        second_pool = f"{row['cloud']}/{row['zone']}/{row['instance_type']}/{row['market']}"
        assert second_pool != first_pool

        # Restart the daemon while the job runs: the process keeps going and is re-adopted.
        assert sw.stop() == 0
        sw.start()
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"))
        assert row["state"] == "SUCCEEDED", row
        time.sleep(1)  # one accrue pass refreshes the gauges
        url = f"http://127.0.0.1:{sw.metrics_port}/metrics"
        metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()

    detail = sw.cli("show", job_id)
    assert 'spotwise_jobs{state="SUCCEEDED"} 1.0' in metrics
    attempts = detail["attempts"]
    assert [a["end_reason"] for a in attempts] == ["interrupted", "finished"]
    assert attempts[0]["pool"] == first_pool and attempts[1]["pool"] == second_pool
    # Resumed from the checkpoint, not from zero.
    starts = (tmp_path / "ckpt" / job_id / "starts.log").read_text().split("\n")
    first_start, second_start = (int(line.split()[0]) for line in starts if line)
    assert first_start == 0 and second_start >= 8
    # Costs add up: each attempt = price x its duration; the job = the sum.
    from datetime import datetime

    total = 0.0
    for a in attempts:
        hours = (
            datetime.fromisoformat(a["ended_at"]) - datetime.fromisoformat(a["started_at"])
        ).total_seconds() / 3600
        assert a["cost_usd"] == pytest.approx(a["price_per_hour"] * hours, rel=1e-3, abs=1e-6)
        assert a["cost_usd"] > 0
        total += a["cost_usd"]
    # Each figure is rounded to a micro-dollar on output, so the sum may differ by that much.
    assert detail["job"]["cost_usd"] == pytest.approx(total, rel=1e-6, abs=1e-6 * len(attempts))
    kinds = [e["kind"] for e in detail["events"]]
    assert kinds[0] == "submitted" and "recovering" in kinds and kinds[-1] == "succeeded"
    log = (tmp_path / "daemon.log").read_text()
    assert "config reload rejected" in log and "config reloaded from" in log


def test_a_stopped_daemon_leaves_each_ended_attempt_billed_to_its_end(tmp_path):
    """The pass that sees an instance end has accrued to its own start, past the end; the
    next accrual refunds that. Passes here are 20 s apart, accrual and price polls (which
    accrue too) hourly, so only the daemon's own accrual at a clean stop can bring the spend
    back to price x run time."""
    sw = Spotwise(tmp_path)
    text = sw.config.read_text()
    text = text.replace('reconcile_interval = "0.3s"', 'reconcile_interval = "20s"')
    text = text.replace('price_interval = "1s"', 'price_interval = "1h"')  # a poll accrues too
    sw.config.write_text(text.replace('accrue_interval = "0.5s"', 'accrue_interval = "1h"'))
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        f'name = "short"\ncommand = ["{sys.executable}", "{COUNTER}", "5", "0.1"]\n'
        'gpus = "V100:1"\n'
    )
    sw.start()
    try:
        job_id = sw.cli("submit", str(job_file))["id"]
        sw.wait_job(job_id, lambda r: r["state"] == "SUCCEEDED", timeout=120)
    finally:
        assert sw.stop() == 0  # at once: the next pass (and its accrual) is 20 s away
    (a,) = sw.cli("show", job_id)["attempts"]
    ran = datetime.fromisoformat(a["ended_at"]) - datetime.fromisoformat(a["started_at"])
    assert ran.total_seconds() < 15  # it ended well before the pass that saw it
    assert a["cost_usd"] == pytest.approx(
        a["price_per_hour"] * ran.total_seconds() / 3600, rel=1e-3, abs=1e-6
    )
