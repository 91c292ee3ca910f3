"""Bit-exact resume after real SIGTERMs, for 1 and 2 ranks, fp32 / fp16+GradScaler / bf16.

Each chain: an uninterrupted reference run, then the same job interrupted by SIGTERM at
step 6 (mid-epoch) and step 12 (an epoch boundary: 4 steps per epoch), resumed each time.
Loss sequences and final parameters must be identical to the reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.support.trainer_runs import (
    REPO,
    env,
    losses,
    progress,
    run_plan,
    run_trainer,
    same_params,
    tiny_args,
)
from trainer import EXIT_PREEMPTED
from trainer.checkpoint import parse_latest

CHAINS = [  # name, precision, async save, parallelism, ranks that get the SIGTERM
    ("fp32", "fp32", False, "ddp", [1]),
    ("fp16", "fp16", True, "ddp", [0]),
    ("bf16", "bf16", False, "ddp", [0]),
]
FSDP_CHAIN = ("fsdp-fp16", "fp16", True, "fsdp", [0, 1])
XSIZE = {"parallelism__mode": "fsdp", "model__dropout": 0.0}


def _chain(tmp: Path, name: str, precision: str, async_save: bool, mode: str, ranks: list[int]):
    ref, res = tmp / f"{name}-ref", tmp / f"{name}-res"

    def args(ckpt: Path, **kw: object) -> list[str]:
        return tiny_args(
            ckpt,
            training__precision=precision,
            checkpoint__async_save=async_save,
            parallelism__mode=mode,
            debug__metrics_file=ckpt.with_suffix(".jsonl"),
            debug__final_params_file=ckpt.with_suffix(".pt"),
            debug__sigterm_ranks=ranks,
            training__fp16_growth_interval=2,  # the loss scale grows and backs off: real state
            **kw,
        )

    plan = [
        args(ref),
        args(res, debug__sigterm_at_step=6),
        args(res, debug__sigterm_at_step=12),
        args(res),
    ]
    return plan, [0, 75, 75, 0], (ref, res)


def _scaler_state(ckpt: Path) -> dict:
    out = ckpt.with_suffix(".ckpt.pt")
    dcp_to_torch_save(ckpt / "step-16", out)
    return torch.load(out, weights_only=False)["extra"]["scaler"]


def _check_chain(ref: Path, res: Path) -> None:
    ref_losses, res_losses = losses(ref.with_suffix(".jsonl")), losses(res.with_suffix(".jsonl"))
    assert len(ref_losses) == 16
    assert res_losses == ref_losses  # bit-exact, including across the two resumes
    assert same_params(ref.with_suffix(".pt"), res.with_suffix(".pt"))
    assert sum(ref_losses[-3:]) < sum(ref_losses[:3])  # it learns
    doc = progress(res)
    assert doc["step"] == doc["total_steps"] == 16
    assert doc["samples"] == 16 * 8
    assert doc["last_checkpoint_step"] == 16 and doc["state"] == "done"
    assert doc["updated_at"].endswith("Z")
    assert json.loads((res / "DONE").read_text())["step"] == 16
    assert (res / "latest").read_text().strip() == "step-16"
    # keep=2: checkpoints 5, 6 (preempt), 10, 12 (preempt), 15, 16 -> only the newest two stay
    assert sorted(p.name for p in res.glob("step-*")) == ["step-15", "step-16"]
    if "fp16" in res.name:  # the GradScaler state is checkpointed and restored
        scaler = _scaler_state(res)
        assert scaler == _scaler_state(ref) and scaler["scale"] != 65536.0


@pytest.fixture(scope="module")
def one_rank_runs(tmp_path_factory: pytest.TempPathFactory):
    """One plain process running every 1-rank chain, then a run that dies mid-save."""
    tmp = tmp_path_factory.mktemp("one")
    plan, expected, dirs = [], [], []
    for name, precision, async_save, mode, _ in CHAINS:
        p, e, d = _chain(tmp, name, precision, async_save, mode, [0])
        plan, expected, dirs = plan + p, expected + e, [*dirs, d]
    # A finished job started again does nothing and exits 0 (DONE is the source of truth).
    plan.append(plan[3])
    expected.append(0)
    # Time-based checkpoints (every step here), a file:// URI, and keep=10.
    timer = tmp / "timer"
    plan.append(
        tiny_args(
            f"file://{timer}",
            training__steps=4,
            checkpoint__interval_steps=0,
            checkpoint__interval_seconds=1e-6,
            checkpoint__keep=10,
        )
    )
    expected.append(0)
    # Last (it takes the process down): rank 0 SIGKILLs itself after step-10's files are
    # written but before `latest` moves. Same config as the fp32 chain, whose ref it reuses.
    crash = tmp / "crash-ref"  # _chain names its first run "<name>-ref"
    plan.append(_chain(tmp, "crash", "fp32", False, "ddp", [0])[0][0])
    plan[-1] += ["--debug.kill_in_save_at_step", "10"]
    codes, proc = run_plan(plan, tmp)
    return codes, expected, proc, dirs, crash


@pytest.mark.timeout(240)
def test_exact_resume_one_rank(one_rank_runs) -> None:
    codes, expected, proc, dirs, _ = one_rank_runs
    assert codes == expected, proc.stderr[-3000:]
    assert proc.stderr.count("DONE exists: nothing to do") == 1
    timer = dirs[0][0].parent / "timer"
    assert sorted(p.name for p in timer.glob("step-*")) == [f"step-{i}" for i in range(1, 5)]
    for ref, res in dirs:
        _check_chain(ref, res)


@pytest.mark.timeout(150)
def test_checkpoint_killed_during_save_is_never_loaded(one_rank_runs) -> None:
    codes, expected, proc, dirs, crash = one_rank_runs
    assert codes == expected and proc.returncode == -9, proc.stderr[-2000:]
    ref = dirs[0][0]  # the fp32 reference
    assert parse_latest((crash / "latest").read_text()) == 5
    assert (crash / "step-10" / ".metadata").is_file()  # complete on disk, but not published
    partial = crash / "step-11"  # as if killed while DCP was still writing shards
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(os.urandom(64))

    out = run_trainer(
        tiny_args(
            crash,
            debug__metrics_file=crash.with_suffix(".jsonl"),
            debug__final_params_file=crash.with_suffix(".pt"),
        )
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "resumed from step-5" in out.stderr
    assert losses(crash.with_suffix(".jsonl")) == losses(ref.with_suffix(".jsonl"))
    assert same_params(ref.with_suffix(".pt"), crash.with_suffix(".pt"))
    assert sorted(p.name for p in crash.glob("step-*")) == ["step-15", "step-16"]


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list, list, object]:
    """One torchrun job (2 ranks, gloo) running every 2-rank chain back to back."""
    tmp = tmp_path_factory.mktemp("two")
    plan, expected, dirs = [], [], []
    for chain in [*CHAINS, FSDP_CHAIN]:
        p, e, d = _chain(tmp, *chain)
        plan, expected, dirs = plan + p, expected + e, [*dirs, d]
    # Reference for the 2 -> 1 rank resume below (dropout off so the 1-rank continuation
    # can be compared numerically).
    xref = tmp / "x-ref"
    plan.append(tiny_args(xref, debug__metrics_file=xref.with_suffix(".jsonl"), **XSIZE))
    expected.append(0)
    codes, proc = run_plan(plan, tmp, nproc=2, timeout=240)
    return tmp, codes, expected, (proc, dirs, xref)


@pytest.mark.timeout(280)
def test_exact_resume_two_ranks(two_rank_runs) -> None:
    _, codes, expected, (proc, dirs, _) = two_rank_runs
    assert codes == expected, proc.stderr[-3000:]
    for ref, res in dirs:
        _check_chain(ref, res)


@pytest.mark.timeout(200)
def test_launcher_sigterm_exit_75_then_resume_on_one_rank(two_rank_runs, tmp_path: Path) -> None:
    """`python -m trainer --nproc-per-node 2` gets a real SIGTERM mid-run; resume on 1 rank."""
    _, codes, _, (proc, _, xref) = two_rank_runs
    assert codes[-1] == 0, proc.stderr[-3000:]
    ckpt = tmp_path / "x"
    metrics = ckpt.with_suffix(".jsonl")
    argv = tiny_args(ckpt, debug__metrics_file=metrics, training__step_delay_seconds=0.3, **XSIZE)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "trainer", "--nproc-per-node", "2", *argv],
        cwd=REPO,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.02)  # waiting on a real process, not a simulated event
        launcher.send_signal(signal.SIGTERM)  # as the local market does after the notice
        _, err = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == EXIT_PREEMPTED, err[-3000:]
    doc = progress(ckpt)
    k = doc["step"]
    assert doc["state"] == "preempted" and doc["last_checkpoint_step"] == k and 3 <= k < 16
    ref = losses(xref.with_suffix(".jsonl"))
    assert losses(metrics) == ref[:k]

    out = run_trainer(tiny_args(ckpt, debug__metrics_file=metrics, **XSIZE))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"resumed from step-{k}" in out.stderr and "world size changed" in out.stderr
    got = losses(metrics)
    assert got[:k] == ref[:k]
    # Same samples, same weights and optimizer state (resharded by DCP): only the reduction
    # order differs between 2 ranks and 1, so the continuation tracks the reference closely.
    assert got[k:] == pytest.approx(ref[k:], rel=1e-4)
    doc = progress(ckpt)
    assert doc["step"] == 16 and doc["world_size"] == 1 and doc["state"] == "done"
