"""Shared helpers for the trainer tests: tiny configs, real subprocess launches, comparisons."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
MULTIRUN = Path(__file__).with_name("multirun.py")

TINY = {
    "model.d_model": 32,
    "model.n_layers": 1,
    "model.n_heads": 2,
    "model.seq_len": 16,
    "model.dropout": 0.1,
    "data.synthetic_chars": 20_000,
    "data.epoch_samples": 32,  # 4 steps per epoch at batch 8: step 12 is an epoch boundary
    "data.num_workers": 0,  # one test runs workers; the rest save the fork
    "training.global_batch_size": 8,
    "training.steps": 16,
    "training.warmup_steps": 4,
    "training.log_interval": 1000,
    "checkpoint.interval_steps": 5,
    "checkpoint.keep": 2,
    "checkpoint.progress_interval_seconds": 0,
    "preemption.cloud": "none",
}


def tiny_args(ckpt: Path | str, **overrides: object) -> list[str]:
    """argv for a tiny run; overrides use ``section__key=value``."""
    values: dict[str, object] = dict(TINY)
    values["checkpoint.uri"] = str(ckpt)
    for key, value in overrides.items():
        values[key.replace("__", ".")] = value
    argv: list[str] = []
    for key, value in values.items():
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        argv += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    out.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    out.update(extra)
    return out


def run_trainer(
    argv: list[str], timeout: float = 120, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m trainer ARGV`` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "trainer", *argv],
        cwd=REPO,
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def torchrun(nproc: int, script: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
        *script,
    ]


def run_plan(
    plan: list[list[str]], tmp: Path, nproc: int = 1, timeout: float = 200, **extra_env: str
) -> tuple[list[int], subprocess.CompletedProcess[str]]:
    """Run trainer invocations back to back in one process (or one torchrun job)."""
    plan_file, results = tmp / "plan.json", tmp / "results.json"
    plan_file.write_text(json.dumps(plan))
    results.unlink(missing_ok=True)
    script = [str(MULTIRUN), str(plan_file), str(results)]
    cmd = torchrun(nproc, script) if nproc > 1 else [sys.executable, *script]
    proc = subprocess.run(
        cmd, cwd=REPO, env=env(**extra_env), capture_output=True, text=True, timeout=timeout
    )
    codes = json.loads(results.read_text()) if results.exists() else []
    return codes, proc


def losses(metrics_file: Path) -> list[float]:
    """Loss per step in step order; a step re-run after a crash keeps its last value."""
    by_step: dict[int, float] = {}
    for line in metrics_file.read_text().splitlines():
        rec = json.loads(line)
        by_step[rec["step"]] = rec["loss"]
    assert sorted(by_step) == list(range(1, len(by_step) + 1)), "steps missing from metrics"
    return [by_step[s] for s in sorted(by_step)]


def same_params(a: Path, b: Path) -> bool:
    pa, pb = torch.load(a), torch.load(b)
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def progress(ckpt: Path) -> dict:
    return json.loads((ckpt / "progress.json").read_text())


def write_notice(path: Path, doc: dict | str) -> None:
    """Write a local-market notice as the market does (a temporary file, then a rename): a
    trainer polling every 20 ms must never read a half-written file."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def sigterm_whole_group(
    cmd: list[str], environ: dict[str, str], ready: Callable[[subprocess.Popen[str]], None]
) -> tuple[int, str]:
    """Run `cmd` in its own session, wait for `ready(proc)`, then SIGTERM its whole process
    group as a shutdown does (systemd, the cloud, the local supervisor): (exit code, stderr)."""
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ready(proc)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err
