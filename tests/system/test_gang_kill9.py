"""kill -9 of the real daemon in the middle of a gang launch, on the local market.

The market is slowed to start a gang's nodes one by one (SPOTWISE_LOCAL_GANG_NODE_DELAY_S),
the daemon is SIGKILLed once node 0 of three exists (its trainer waiting at the rendezvous for
two nodes that were never asked for: a half-gang), and restarted without the delay. After the
restart no half-gang may be left running: either the launch is completed under its token or
its nodes are terminated and the gang relaunched whole. No instance may leak, and the job must
finish SUCCEEDED with all three nodes in one process group.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from providers.base import InstanceState
from providers.local import LocalMarket, LocalSettings
from providers.local.market import GANG_NODE_DELAY_ENV
from tests.system.test_e2e_local import Spotwise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
NODES, STEPS = 3, 8


def _job(tmp: Path, metrics: Path) -> Path:
    cmd = ["python", "-m", "trainer", "--nnodes", str(NODES), "--nproc-per-node", "1",
           "--config", "tiny", "--training.steps", str(STEPS), "--training.global_batch_size",
           "12", "--checkpoint.interval_steps", "4", "--model.dropout", "0",
           "--data.num_workers", "0", "--checkpoint.async_save", "false",
           "--debug.metrics_file", str(metrics)]  # fmt: skip
    job = tmp / "gang.toml"
    job.write_text(
        f'name = "gang"\ngpus = "V100:1"\nnodes = {NODES}\ngpu_hours = 1\n'
        f'regions = ["us-east-2"]\ncommand = {json.dumps(cmd)}\n'
    )
    return job


def _instances(market_dir: Path) -> list[str]:
    root = market_dir / "instances"
    return sorted(p.name for p in root.glob("local-*")) if root.exists() else []


def _wait(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill9_during_a_gang_launch_leaves_no_half_gang(tmp_path, monkeypatch):
    sw = Spotwise(tmp_path)
    market_dir = tmp_path / "market"
    market = LocalMarket(LocalSettings(state_dir=market_dir, speedup=1))
    metrics = tmp_path / "gang.jsonl"
    monkeypatch.setenv(GANG_NODE_DELAY_ENV, "120")  # only the first daemon inherits it
    sw.start()
    monkeypatch.delenv(GANG_NODE_DELAY_ENV)
    try:
        job_id = sw.cli("submit", str(_job(tmp_path, metrics)))["id"]
        # Node 0 exists (and runs its trainer); nodes 1 and 2 were never launched.
        (first,) = _wait(lambda: _instances(market_dir), 120, "node 0's instance")
        _wait(lambda: market.describe([first])[0].state is InstanceState.RUNNING, 60, "node 0 up")
        assert _instances(market_dir) == [first]
        assert sw.daemon is not None
        os.kill(sw.daemon.pid, signal.SIGKILL)
        assert sw.daemon.wait(timeout=30) == -signal.SIGKILL
        assert _instances(market_dir) == [first]  # the half-gang outlived its daemon

        sw.start()
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=300)
        shown = sw.cli("show", job_id)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED", (row, (tmp_path / "daemon.log").read_text()[-3000:])

    attempts = shown["attempts"]
    final = attempts[-1]
    assert final["end_reason"] == "finished" and final["nodes"] == NODES
    assert sorted(n["node"] for n in final["instances"]) == list(range(NODES))
    # Every instance any attempt recorded is ended, and the market holds no other: no leak.
    recorded = [n["instance_id"] for a in attempts for n in a["instances"] if n["instance_id"]]
    assert len(recorded) == len(set(recorded))
    assert set(_instances(market_dir)) == set(recorded) and first in recorded
    ended = _wait(
        lambda: all(i.state is InstanceState.ENDED for i in market.describe(recorded)),
        30,
        "every instance ended",
    )
    assert ended and all(n["state"] == "ENDED" for a in attempts for n in a["instances"])
    final_ids = {n["instance_id"] for n in final["instances"]}
    if first in final_ids:  # completed under its token: one gang, three instances in all
        assert len(recorded) == NODES
    else:  # node 0 was terminated (ended above) and the gang relaunched whole
        assert len(final_ids) == NODES and len(recorded) == 1 + NODES * (len(attempts) - 1)
    # The three nodes formed one process group: each step reported once, by global rank 0.
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert sorted(set(steps)) == list(range(1, STEPS + 1)), steps
