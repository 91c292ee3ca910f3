"""checkpoint.interval = "auto": the trainer saves by the interval the daemon passed at
launch and follows checkpoint_interval.json in the store when the daemon rewrites it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.trainer_runs import REPO, env, progress, tiny_args
from trainer import contract
from trainer.interval import DEFAULT_SECONDS, MIN_SECONDS, READ_EVERY, IntervalFollower


class _Store:
    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.reads = 0

    def read_text(self, name: str) -> str | None:
        self.reads += 1
        return self.files.get(name)


def test_the_follower_starts_from_the_launch_value_and_follows_the_store() -> None:
    store = _Store()
    f = IntervalFollower(store, "job-1", {contract.ENV_CHECKPOINT_INTERVAL: "420"})
    assert f.current(now=0.0) == 420
    doc = {"seconds": 95.0, "job_id": "job-1", "attempt": 1}
    store.files[contract.CHECKPOINT_INTERVAL] = json.dumps(doc)
    assert f.current(now=1.0) == 420  # not re-read before READ_EVERY
    assert f.current(now=READ_EVERY + 1) == 95
    store.files[contract.CHECKPOINT_INTERVAL] = json.dumps({**doc, "job_id": "other"})
    assert f.current(now=3 * READ_EVERY) == 95  # another job's document is not ours
    store.files[contract.CHECKPOINT_INTERVAL] = json.dumps({**doc, "seconds": 0.001})
    assert f.current(now=5 * READ_EVERY) == MIN_SECONDS
    store.files[contract.CHECKPOINT_INTERVAL] = "{half-writ"
    assert f.current(now=7 * READ_EVERY) == MIN_SECONDS  # unreadable: keeps what it had
    assert IntervalFollower(_Store(), None, {}).current(now=0) == DEFAULT_SECONDS


@pytest.mark.timeout(120)
def test_the_trainer_saves_by_the_daemons_interval(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    argv = tiny_args(
        ckpt,
        training__steps=100_000,
        checkpoint__interval_steps=1,  # ignored under "auto" (else a save at every step)
        checkpoint__interval="auto",
        training__step_delay_seconds=0.05,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *argv],
        cwd=REPO,
        env=env(SPOTWISE_CHECKPOINT_URI="", SPOTWISE_CHECKPOINT_INTERVAL="3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    saves: list[tuple[float, int]] = []  # (when seen, step) of each new durable checkpoint
    try:
        deadline = time.monotonic() + 90
        while len(saves) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            path = ckpt / "progress.json"
            step = progress(ckpt).get("last_checkpoint_step") if path.exists() else None
            if isinstance(step, int) and (not saves or step != saves[-1][1]):
                saves.append((time.monotonic(), step))
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    # Saves come by the launch interval (3 s), not at every step (0.05 s apart).
    assert saves[1][0] - saves[0][0] > 2.0 and saves[1][1] - saves[0][1] > 5


OWN_LOOP = """
import time, torch
from trainer.preemptible import Preemptible
model = torch.nn.Linear(2, 1)
state = {"model": model}
with Preemptible(total_steps=10**6, save_every=1, interval="auto") as job:
    step = job.load(state)
    while True:
        step += 1
        job.step(step, state, 0.0)
        time.sleep(0.02)
"""


@pytest.mark.timeout(120)
def test_preemptible_follows_the_daemons_interval_too(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    proc = subprocess.Popen(
        [sys.executable, "-c", OWN_LOOP],
        cwd=REPO,
        env=env(
            SPOTWISE_CHECKPOINT_URI=contract.to_uri(ckpt),
            SPOTWISE_CHECKPOINT_INTERVAL="2",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    saves: list[tuple[float, int]] = []
    try:
        deadline = time.monotonic() + 90
        while len(saves) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            step = (
                progress(ckpt).get("last_checkpoint_step")
                if (ckpt / "progress.json").exists()
                else None
            )
            if isinstance(step, int) and (not saves or step != saves[-1][1]):
                saves.append((time.monotonic(), step))
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    # Every 2 s by the daemon's interval, not at every step as save_every=1 would.
    assert saves[1][0] - saves[0][0] > 1.5 and saves[1][1] - saves[0][1] > 5
