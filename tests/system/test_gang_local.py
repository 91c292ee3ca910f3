"""Gangs end to end on the local market: the real daemon, two "nodes" (two local process
groups of two torchrun workers each, joined over loopback with gloo by torchrun's static
rendezvous), a node interrupted, one common checkpoint, the gang re-placed and resumed
bit-exactly; elastic, it continues on one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from providers.local import LocalMarket, LocalSettings
from tests.support.trainer_runs import same_params
from tests.system.test_e2e_local import Spotwise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
STEPS = 40
ARGS = [
    "--config", "tiny", "--training.steps", str(STEPS), "--checkpoint.interval_steps", "10",
    "--model.dropout", "0", "--data.num_workers", "0", "--checkpoint.async_save", "false",
]  # fmt: skip


def _losses(path: Path) -> dict[int, set[float]]:
    out: dict[int, set[float]] = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        out.setdefault(doc["step"], set()).add(doc["loss"])
    return out


def _job(tmp: Path, name: str, metrics: Path, extra: str = "") -> Path:
    cmd = ["python", "-m", "trainer", "--nnodes", "2", "--nproc-per-node", "2", *ARGS,
           "--training.step_delay_seconds", "1.0", "--debug.metrics_file", str(metrics),
           "--debug.final_params_file", str(metrics.with_suffix(".pt"))]  # fmt: skip
    job = tmp / f"{name}.toml"
    job.write_text(
        f'name = "{name}"\ngpus = "V100:1"\nnodes = 2\ngpu_hours = 1\nregions = ["us-east-2"]\n'
        f"command = {json.dumps(cmd)}\n{extra}"
    )
    return job


def _interrupt_node_1(sw: Spotwise, job_id: str) -> dict:
    """Interrupts node 1 once the gang is running and past step 3; returns the attempt as
    `show` printed it just before (the gang is placed by then, unlike right after submit)."""
    sw.wait_job(job_id, lambda r: r["state"] == "RUNNING" and (r["progress_step"] or 0) >= 3, 180)
    attempt = sw.cli("show", job_id)["attempts"][-1]
    assert [n["node"] for n in attempt["instances"]] == [0, 1]
    market = LocalMarket(LocalSettings(state_dir=sw.home / "market", speedup=1))
    assert market.interrupt(attempt["instances"][1]["instance_id"])
    return attempt


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run every gang's losses and weights are compared with: one node of
    four ranks (global rank = node x 2 + local rank in the gang)."""
    tmp = tmp_path_factory.mktemp("reference")
    out = tmp / "reference.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    subprocess.run(
        [sys.executable, "-m", "trainer", "--nproc-per-node", "4", *ARGS,
         "--checkpoint.uri", str(tmp / "ref-ckpt"), "--debug.metrics_file", str(out),
         "--debug.final_params_file", str(out.with_suffix(".pt"))],
        check=True, env=env, timeout=240, capture_output=True,
    )  # fmt: skip
    return out


def _exact(reference: Path, metrics: Path) -> None:
    want, got = _losses(reference), _losses(metrics)
    assert set(got) == set(range(1, STEPS + 1)) and all(len(v) == 1 for v in got.values())
    # Bit-exact: every step's loss, before and after the resume, and the final weights are
    # the uninterrupted 1 node x 4 ranks reference's (global rank = node * 2 + local rank).
    assert {s: got[s] for s in got if got[s] != want[s]} == {}
    assert same_params(reference.with_suffix(".pt"), metrics.with_suffix(".pt"))


def test_a_two_node_gang_survives_losing_a_node_and_resumes_exactly(tmp_path, reference):
    sw = Spotwise(tmp_path)
    with sw.config.open("a") as f:
        f.write('\n[gangs]\nrecovery = "whole"\n')
    metrics = tmp_path / "gang.jsonl"
    sw.start()
    try:
        job_id = sw.cli("submit", str(_job(tmp_path, "gang", metrics)))["id"]
        _interrupt_node_1(sw, job_id)
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
        shown = sw.cli("show", job_id)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED" and row["recoveries"] == 1, row
    first, last = shown["attempts"][0], shown["attempts"][-1]
    assert first["end_reason"] == "interrupted" and last["end_reason"] == "finished"
    assert first["nodes"] == 2 and last["nodes"] == 2
    # Both nodes of the interrupted gang stopped and were billed; the attempt is their sum.
    assert all(n["state"] == "ENDED" for n in first["instances"])
    # `show` rounds each figure to a micro-dollar, so the sum may be off by one per node.
    nodes = first["instances"]
    assert first["cost_usd"] == pytest.approx(
        sum(n["cost_usd"] for n in nodes), abs=1e-6 * len(nodes)
    )
    # One common checkpoint: every rank stopped on the same step, which the gang resumed from.
    log = (Path(row["checkpoint_uri"].removeprefix("file://"))).glob("step-*")
    steps = sorted(int(p.name.split("-")[1]) for p in log)
    assert steps and steps[-1] == STEPS
    # The second attempt re-ran no step: it resumed from the one the whole gang stopped on.
    assert len(metrics.read_text().splitlines()) == STEPS
    _exact(reference, metrics)


def test_a_two_node_gang_replaces_the_lost_node_keeps_the_other_and_resumes_exactly(
    tmp_path, reference
):
    """The replace-one path: node 1 is taken back, node 0 keeps running (its wrapper waits
    for the next rendezvous round), one replacement joins as node 1 in round 1, and every
    rank resumes from the common checkpoint, bit-exactly, in the same attempt."""
    sw = Spotwise(tmp_path)
    with sw.config.open("a") as f:
        f.write('\n[gangs]\nrecovery = "replace"\n')
    metrics = tmp_path / "replace.jsonl"
    sw.start()
    try:
        job_id = sw.cli("submit", str(_job(tmp_path, "replace", metrics)))["id"]
        before = _interrupt_node_1(sw, job_id)
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
        shown = sw.cli("show", job_id)
        events = sw.cli("events", "--job", job_id)["events"]
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED" and row["recoveries"] == 0, row
    (only,) = shown["attempts"]  # one attempt: the gang was never re-placed
    assert only["end_reason"] == "finished" and only["nodes"] == 2
    got = [(n["node"], n["round"]) for n in only["instances"]]
    assert got == [(0, 0), (1, 0), (1, 1)], got
    node0 = only["instances"][0]["instance_id"]
    assert node0 == before["instances"][0]["instance_id"]  # kept, never stopped
    kinds = [e["kind"] for e in events]
    assert "gang_replace" in kinds and "gang_resumed" in kinds and "gang_stop" not in kinds
    assert only["cost_usd"] == pytest.approx(
        sum(n["cost_usd"] for n in only["instances"]), abs=1e-6 * 3
    )
    # Every step once: the round resumed from the common checkpoint, re-running nothing.
    assert len(metrics.read_text().splitlines()) == STEPS
    _exact(reference, metrics)


def test_an_elastic_gang_continues_on_one_node(tmp_path):
    sw = Spotwise(tmp_path)
    metrics = tmp_path / "elastic.jsonl"
    sw.start()
    market = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1))
    try:
        job_id = sw.cli("submit", str(_job(tmp_path, "elastic", metrics, "min_nodes = 1\n")))["id"]
        sw.wait_job(job_id, lambda r: r["state"] == "RUNNING", 120)
        market.set_capacity({"*": 1})  # every pool now holds one more instance at most
        _interrupt_node_1(sw, job_id)
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=300)
        shown = sw.cli("show", job_id)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED", row
    ends = [(a["nodes"], a["end_reason"]) for a in shown["attempts"]]
    assert ends[0] == (2, "interrupted") and ends[-1] == (1, "finished"), ends
    assert any("only 1 of 2" in (a["detail"] or "") for a in shown["attempts"]), ends
    assert set(_losses(metrics)) == set(range(1, STEPS + 1))
