"""The trainer's ways in, run by the real daemon on the local market: your own loop through
`trainer.Preemptible` (interrupted, resumed exactly) and a Hugging Face causal LM built from a
config with random weights (trained end to end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from providers.local import LocalMarket, LocalSettings
from tests.system.test_e2e_local import Spotwise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _losses(path: Path) -> dict[int, set[float]]:
    out: dict[int, set[float]] = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        out.setdefault(doc["step"], set()).add(doc["loss"])
    return out


def test_own_loop_is_interrupted_and_resumes_exactly(tmp_path):
    steps = 60
    reference = tmp_path / "reference.jsonl"
    env = dict(os.environ, SPOTWISE_CHECKPOINT_URI=str(tmp_path / "ref-ckpt"))
    for k in ("SPOTWISE_ATTEMPT", "SPOTWISE_NOTICE_FILE", "SPOTWISE_CLOUD"):
        env.pop(k, None)
    subprocess.run(
        [sys.executable, "-m", "trainer.examples.own_loop", "--steps", str(steps),
         "--save-every", "10", "--losses", str(reference)],
        check=True, env=env, timeout=240,
    )  # fmt: skip

    sw = Spotwise(tmp_path)
    losses = tmp_path / "scheduled.jsonl"
    job = tmp_path / "own.toml"
    job.write_text(
        'name = "own-loop"\ngpus = "V100:1"\ngpu_hours = 1\n'
        'command = ["python", "-m", "trainer.examples.own_loop", '
        f'"--steps", "{steps}", "--save-every", "10", "--step-delay", "0.15", '
        f'"--losses", "{losses}"]\n'
    )
    sw.start()
    try:
        job_id = sw.cli("submit", str(job))["id"]
        row = sw.wait_job(job_id, lambda r: (r["progress_step"] or 0) >= 15, timeout=120)
        market = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1))
        assert market.interrupt(row["instance_id"])
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=180)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED" and row["recoveries"] == 1, row
    ends = [a["end_reason"] for a in sw.cli("show", job_id)["attempts"]]
    assert ends == ["interrupted", "finished"]
    want, got = _losses(reference), _losses(losses)
    assert set(got) == set(range(1, steps + 1))
    # Steps between the last checkpoint and the notice ran twice: both times identically.
    assert any(len(v) == 1 and v == want[s] for s, v in got.items())
    assert {s: v for s, v in got.items()} == {s: want[s] for s in got}


def test_hf_causal_lm_trains_end_to_end_under_the_scheduler(tmp_path):
    pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
    sw = Spotwise(tmp_path)
    job = tmp_path / "hf.toml"
    job.write_text(
        'name = "hf-tiny"\ngpus = "V100:1"\ngpu_hours = 1\n'
        'command = ["python", "-m", "trainer", "--config", "hf-tiny", "--training.steps", "20",'
        ' "--checkpoint.interval_steps", "10"]\n'
    )
    sw.start()
    try:
        job_id = sw.cli("submit", str(job))["id"]
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED", row
    assert row["progress_step"] == 20 and row["total_steps"] == 20
    assert (Path(row["checkpoint_uri"].removeprefix("file://")) / "DONE").exists()
