"""Training techniques: activation checkpointing, DDP comm hooks (PowerSGD state resumes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.trainer_runs import losses, run_plan, tiny_args
from trainer.config import TrainerConfig
from trainer.model import CharTransformer
from trainer.parallel import apply_activation_checkpointing, shard_units


def _saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> tuple[float, int, list]:
    """Loss, bytes autograd keeps for backward, and the gradients (one fwd/bwd)."""
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    torch.manual_seed(7)  # the same dropout masks for every variant
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x[:, :-1], x[:, 1:])
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return loss.item(), saved, grads


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_same_math_less_saved(mode: str) -> None:
    cfg = TrainerConfig()
    cfg.model.n_layers, cfg.model.d_model, cfg.model.seq_len = 4, 32, 32
    x = torch.randint(0, 20, (4, 33))
    results = {}
    for m in ("none", mode):
        torch.manual_seed(0)
        model = CharTransformer(cfg.model, 20)
        assert apply_activation_checkpointing(model, m) == {"none": 0, "full": 4}.get(m, 2)
        results[m] = _saved_bytes(model, x)
    (l0, s0, g0), (l1, s1, g1) = results["none"], results[mode]
    assert l0 == l1 and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    assert s1 < (0.5 if mode == "full" else 0.8) * s0  # far less kept for backward
    assert len(shard_units(model)) == 4


@pytest.mark.timeout(300)
def test_comm_hooks_and_powersgd_state_resume_exactly(tmp_path: Path) -> None:
    """2 ranks: PowerSGD (rank 1, error feedback) SIGTERMed at step 6 and resumed bit-exactly;
    fp16 compression runs; the PowerSGD run differs from plain all-reduce (it is active)."""
    psgd = dict(parallelism__comm_hook="powersgd", parallelism__powersgd_start_iter=2)

    def args(c: Path, **kw: object) -> list[str]:
        return tiny_args(c, debug__metrics_file=c.with_suffix(".jsonl"), model__dropout=0, **kw)

    ref, res, fp16, plain = (tmp_path / n for n in ("ref", "res", "fp16", "plain"))
    plan = [
        args(ref, **psgd),
        args(res, debug__sigterm_at_step=6, **psgd),
        args(res, **psgd),
        args(fp16, parallelism__comm_hook="fp16"),
        args(plain),
    ]
    codes, proc = run_plan(plan, tmp_path, nproc=2, timeout=280)
    assert codes == [0, 75, 0, 0, 0], proc.stderr[-3000:]
    ref_l = losses(ref.with_suffix(".jsonl"))
    assert losses(res.with_suffix(".jsonl")) == ref_l
    plain_l = losses(plain.with_suffix(".jsonl"))
    assert ref_l[:2] == plain_l[:2] and ref_l[3:] != plain_l[3:]  # compressed from step 3
    assert losses(fp16.with_suffix(".jsonl")) == pytest.approx(plain_l, rel=5e-2)


def test_ddp_stages_the_replicated_state_on_one_rank_only() -> None:
    """Under DDP the model/optimizer are replicas: only rank 0 hands them to DCP (and so
    stages a host copy); every rank still saves its own RNG (and PowerSGD state)."""
    from trainer.distributed import DistInfo
    from trainer.parallel import CommHook
    from trainer.train import Trainer

    def state_keys(rank: int, one_replica: bool) -> set[str]:
        t = object.__new__(Trainer)
        t.info = DistInfo(rank, 2, rank, torch.device("cpu"), False)
        t.one_replica = one_replica
        t.model = torch.nn.Linear(2, 2)
        t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.1)
        t.scheduler = torch.optim.lr_scheduler.LambdaLR(t.optimizer, lambda s: 1.0)
        t.step = t.samples = 0
        t.precision = type("P", (), {"state_dict": lambda self: {}})()
        t.comm = CommHook("none")
        return set(t.state())

    assert state_keys(0, True) == {"app", "extra", "rng_rank0"}
    assert state_keys(1, True) == {"rng_rank1"}
    assert state_keys(1, False) == {"app", "extra", "rng_rank1"}
