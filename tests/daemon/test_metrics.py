"""Prometheus metrics as Prometheus users expect them: `_total` counters that exist at 0,
`_duration_seconds`, the process collector, build_info, and the series an operator alerts
on, read from the database as increments, never as a scan of history."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from sqlmodel import Session

from scheduler.core.catalog import Catalog
from scheduler.core.config import parse_config
from scheduler.daemon.metrics import Metrics
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, SpendBucket
from tests.support.cli_run import env
from tests.support.fakes import offering
from tests.support.ops_world import make_ops_world


def _samples(m: Metrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(m.registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_counters_exist_at_zero_and_names_are_prometheus_style():
    m = Metrics("1.2.3", "0006")
    s = _samples(m)
    for task in ("poll_prices", "reconcile", "accrue", "maintain"):
        assert s[f'spotwise_task_errors_total{{task="{task}"}}'] == 0.0
        assert s[f'spotwise_task_duration_seconds_count{{task="{task}"}}'] == 0.0
    for reason in ("launch_failed", "rejected", "lost"):
        assert s[f'spotwise_launch_failures_total{{reason="{reason}"}}'] == 0.0
    assert any(k.startswith("spotwise_build_info{") and 'version="1.2.3"' in k for k in s)
    assert "process_cpu_seconds_total" in s and "process_resident_memory_bytes" in s
    assert not any(k.startswith("spotwise_task_seconds") for k in s)  # the old name


def test_refresh_reads_what_changed(tmp_path: Path):
    w = make_ops_world(tmp_path)
    cfg = parse_config(
        '[daemon]\nteams = ["research", "vision"]\n[[budgets]]\nname = "r"\n'
        'scope = "team:research"\nlimit_usd = 10\n',
        "c",
    )
    cat = Catalog([offering("us-east-1a"), offering("us-east-1a", market="on-demand")])
    m = Metrics()
    now = datetime.now(UTC)
    m.refresh(w.engine, cat, cfg, now, {})  # type: ignore[arg-type]
    s = _samples(m)
    assert s['spotwise_interruptions_total{cloud="aws",region="us-east-1"}'] == 0.0
    assert s['spotwise_spend_usd_total{cloud="aws",team="research"}'] == 0.0
    assert s['spotwise_jobs{state="RUNNING"}'] == 1.0
    assert s['spotwise_burn_usd_per_hour{cloud="aws",team="vision"}'] == pytest.approx(0.918)
    assert s["spotwise_oldest_pending_age_seconds"] >= 5 * 60 - 5  # submitted 5 min ago
    assert s['spotwise_offerings{cloud="aws",market="spot",provider="aws"}'] == 1.0
    with Session(w.engine) as session:  # type: ignore[arg-type]
        a = session.get(Attempt, f"{w.ids['failed']}-a1")
        assert a is not None
        emit(session, now, "attempt_interrupted", "x", job_id=a.job_id, attempt_id=a.id)
        emit(session, now, "attempt_rejected", "y", job_id=a.job_id, attempt_id=a.id)
        session.add(SpendBucket(hour=now.replace(minute=0, second=0, microsecond=0),
                                attempt_id=a.id, job_id=a.job_id, job_name="crashes",
                                team="research", cloud="aws", usd=1.5))  # fmt: skip
        session.commit()
    m.refresh(w.engine, cat, cfg, now + timedelta(seconds=30), {})  # type: ignore[arg-type]
    s = _samples(m)
    assert s['spotwise_interruptions_total{cloud="aws",region="us-east-1"}'] == 1.0
    assert s['spotwise_launch_failures_total{reason="rejected"}'] == 1.0
    assert s['spotwise_spend_usd_total{cloud="aws",team="research"}'] == pytest.approx(1.5)
    m.refresh(w.engine, cat, cfg, now + timedelta(seconds=60), {})  # type: ignore[arg-type]
    assert _samples(m)['spotwise_interruptions_total{cloud="aws",region="us-east-1"}'] == 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_real_daemon_serves_them(tmp_path: Path):
    port = _free_port()
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\nmetrics_port = {port}\n'
        "[providers.local]\nspeedup = 60\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "daemon", "-c", str(cfg)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        text = ""
        end = time.monotonic() + 30
        # the gauge reads 0 until the first pass has finished
        while time.monotonic() < end and not re.search(
            r"^spotwise_last_pass_timestamp_seconds [1-9]", text, re.M
        ):
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                continue
        assert 'spotwise_task_errors_total{task="maintain"} 0.0' in text, text[-2000:]
        assert "spotwise_build_info{" in text and "process_cpu_seconds_total" in text
        assert 'spotwise_offerings{cloud="aws",market="spot",provider="local"}' in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
