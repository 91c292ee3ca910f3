"""Placing on a notice, end to end on the local market: the real daemon, the real trainer.

The market announces an interruption; the daemon places and launches the job's next attempt
at once, while the old trainer trains on until SIGTERM and writes its final checkpoint; the
new trainer waits for the store, is handed it once the old attempt has ended, and resumes
from exactly that save. Every step runs once, and `show` bills each attempt at its price.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from providers.local import LocalMarket, LocalSettings
from tests.support.trainer_runs import TINY
from tests.system.test_e2e_local import Spotwise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

STEPS = 160


def _trainer_command(metrics: Path) -> list[str]:
    values = dict(TINY)
    values.update({
        "training.steps": STEPS,
        "training.step_delay_seconds": 0.05,
        "checkpoint.interval_steps": 1000,  # only the final save: the resume point is exact
        # The daemon learns the notice from the market; the trainer saves on SIGTERM, so the
        # old attempt is still training (then saving) when its replacement runs.
        "preemption.cloud": "none",
        "debug.metrics_file": str(metrics),
    })  # fmt: skip
    argv = [sys.executable, "-m", "trainer"]
    for key, value in values.items():
        argv += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def test_the_next_attempt_runs_before_the_noticed_one_ends(tmp_path):
    sw = Spotwise(tmp_path)
    text = sw.config.read_text()
    text = text.replace('grace_period = "0.3s"', 'grace_period = "4s"')  # notice -> SIGTERM
    sw.config.write_text(
        text.replace('leak_grace = "1h"', 'leak_grace = "1h"\nhandover_grace = "5s"')
    )
    metrics = tmp_path / "steps.jsonl"
    job = tmp_path / "job.toml"
    job.write_text(
        'name = "handover"\ngpus = "V100:1"\ngpu_hours = 1\nplace_on_notice = true\n'
        f"command = {json.dumps(_trainer_command(metrics))}\n"
    )
    sw.start()
    try:
        job_id = sw.cli("submit", str(job))["id"]
        row = sw.wait_job(
            job_id, lambda r: r["state"] == "RUNNING" and (r["progress_step"] or 0) >= 10,
            timeout=90,
        )  # fmt: skip
        market = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1))
        assert market.interrupt(row["instance_id"])
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=120)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED" and row["recoveries"] == 1, row
    detail = sw.cli("show", job_id)
    old, new = detail["attempts"]
    assert [old["end_reason"], new["end_reason"]] == ["interrupted", "finished"]
    assert new["pool"] != old["pool"]
    # The new attempt ran before the old one had ended.
    assert datetime.fromisoformat(new["started_at"]) < datetime.fromisoformat(old["ended_at"])
    kinds = [e["kind"] for e in detail["events"]]
    assert "store_handed_over" in kinds
    # Every step exactly once: the new trainer resumed from the old one's final save.
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert sorted(steps) == list(range(1, STEPS + 1)), steps
    # Each attempt billed at the price it paid, for its own run; the job is their sum.
    total = 0.0
    for a in (old, new):
        hours = (
            datetime.fromisoformat(a["ended_at"]) - datetime.fromisoformat(a["started_at"])
        ).total_seconds() / 3600
        assert a["cost_usd"] == pytest.approx(a["price_per_hour"] * hours, rel=1e-3, abs=1e-6)
        total += a["cost_usd"]
    assert detail["job"]["cost_usd"] == pytest.approx(total, rel=1e-6, abs=2e-6)
