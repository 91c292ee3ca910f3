"""``Preemptible`` in a plain PyTorch loop (trainer/examples/own_loop.py): notice, 75, resume."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.trainer_runs import (
    REPO,
    env,
    losses,
    progress,
    sigterm_whole_group,
    write_notice,
)
from trainer import EXIT_FENCED, EXIT_PREEMPTED, contract

EXAMPLE = [sys.executable, "-m", "trainer.examples.own_loop", "--steps", "30", "--save-every", "10"]


def _env(ckpt: Path, notice: Path, **extra: str) -> dict[str, str]:
    return env(
        SPOTWISE_CHECKPOINT_URI=contract.to_uri(ckpt),
        SPOTWISE_CLOUD="local",
        SPOTWISE_NOTICE_FILE=str(notice),
        **extra,
    )


def _run(args: list[str], e: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXAMPLE, *args], cwd=REPO, env=e, capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(300)
def test_own_loop_notice_exit_75_and_exact_resume(tmp_path: Path) -> None:
    notice = tmp_path / "notice.json"
    ref = tmp_path / "ref"
    out = _run(["--losses", str(ref.with_suffix(".jsonl"))], _env(ref, notice))
    assert out.returncode == 0, out.stderr[-2000:]

    ckpt = tmp_path / "job 1"  # a space: the URI is file:// with %20
    log = tmp_path / "res.jsonl"
    e = _env(ckpt, notice)
    proc = subprocess.Popen(
        [*EXAMPLE, "--losses", str(log), "--step-delay", "0.1"],
        cwd=REPO,
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (log.exists() and len(log.read_text().splitlines()) >= 13):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)  # waiting on a real process
        write_notice(notice, json.dumps({"action": "terminate", "time": "2099-01-01T00:00:00Z"}))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    doc = progress(ckpt)
    k = doc["step"]
    assert doc["state"] == "preempted" and doc["last_checkpoint_step"] == k and 13 <= k < 30
    assert doc["save_fits_notice"] is True and doc["last_save_seconds"] > 0
    assert (ckpt / "latest").read_text().strip() == f"step-{k}"  # not the periodic step-10
    notice.unlink()

    out = _run(["--losses", str(log)], e)
    assert out.returncode == 0, out.stderr[-2000:]
    assert losses(log) == losses(ref.with_suffix(".jsonl"))  # bit-exact, dropout included
    assert progress(ckpt)["state"] == "done" and (ckpt / contract.DONE).exists()
    again = _run([], e)  # DONE: nothing to do
    assert again.returncode == 0 and losses(log) == losses(ref.with_suffix(".jsonl"))

    fenced = tmp_path / "fenced"
    fenced.mkdir()
    (fenced / contract.OWNER).write_text(contract.owner_doc(9, "a9", "j"))
    out = _run([], _env(fenced, notice, SPOTWISE_ATTEMPT="8"))
    assert out.returncode == EXIT_FENCED and "fenced: " in out.stderr
    assert sorted(p.name for p in fenced.iterdir()) == [contract.OWNER]


@pytest.mark.timeout(200)
def test_own_loop_on_two_ranks_keeps_75_through_the_launcher(tmp_path: Path) -> None:
    notice = tmp_path / "notice.json"
    ckpt = tmp_path / "c"
    e = _env(ckpt, notice)
    cmd = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", "2",
           "-m", "trainer.examples.own_loop", "--steps", "300", "--step-delay", "0.1"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=e, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        path = ckpt / contract.PROGRESS
        while not (path.exists() and json.loads(path.read_text())["step"] >= 1):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)  # waiting on real processes
        write_notice(notice, '{"action": "terminate"}')
        _, err = proc.communicate(timeout=100)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    doc = progress(ckpt)
    assert doc["state"] == "preempted" and doc["world_size"] == 2
    assert (ckpt / "latest").read_text().strip() == f"step-{doc['step']}"


_LOOP_WITH_WORKERS = """
import time, torch
from torch.utils.data import DataLoader
from trainer import Preemptible, ignore_stop_signals
model = torch.nn.Linear(2, 1)
state = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
data = DataLoader(range(10**6), batch_size=4, num_workers=2, worker_init_fn=ignore_stop_signals)
with Preemptible(total_steps=10**6) as job:
    step = job.load(state)
    for batch in data:
        step += 1
        job.step(step, state, 0.0)
        if step == 3:
            print("running", flush=True)
        time.sleep(0.02)
"""


@pytest.mark.timeout(120)
def test_own_loop_with_loader_workers_survives_a_group_sigterm_with_the_helper(
    tmp_path: Path,
) -> None:
    """A shutdown signals every process of the job; with `ignore_stop_signals` as the
    workers' init the loop saves and exits 75 (without it, the worker dies of the signal
    and torch raises "DataLoader worker ... killed by signal" in the loop)."""
    ckpt = tmp_path / "ckpt"

    def running(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None and proc.stdout.readline() == "running\n"

    code, err = sigterm_whole_group(
        [sys.executable, "-c", _LOOP_WITH_WORKERS],
        _env(ckpt, tmp_path / "notice.json"),
        running,
    )
    assert code == EXIT_PREEMPTED, err[-2000:]
    assert progress(ckpt)["state"] == "preempted"
