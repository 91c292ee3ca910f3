"""Throughput and technique figures for ``python -m trainer.bench``.

In one run and on one model: steps/s and samples/s of the trainer's step path (its
DataLoader, precision wrapper, accumulation, the per-step agreement all-reduce and progress)
against a bare PyTorch loop of the same model and batches: the trainer's tax. Then each
technique on and off: activation checkpointing (bytes kept for backward, CUDA peak memory),
gradient accumulation, bf16 autocast, and DDP comm hooks (bytes all-reduced per step,
counted at ``torch.distributed.all_reduce``, on a one-rank gloo group).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from trainer import distributed
from trainer.config import TrainerConfig
from trainer.data import build as build_data
from trainer.data import make_loader
from trainer.model import build as build_model
from trainer.parallel import apply_activation_checkpointing, register_comm_hook


def bench_config(d_model: int, layers: int, seq: int, batch: int) -> TrainerConfig:
    cfg = TrainerConfig()
    cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads = d_model, layers, 4
    cfg.model.seq_len, cfg.model.dropout = seq, 0.0
    cfg.data.synthetic_chars, cfg.data.num_workers = 400_000, 0
    cfg.training.global_batch_size, cfg.training.steps = batch, 10_000
    cfg.training.log_interval = 10_000
    cfg.checkpoint.interval_steps, cfg.checkpoint.progress_interval_seconds = 0, 5.0
    cfg.preemption.cloud = "none"
    return cfg


def _rate(step: Callable[[], Any], steps: int, warmup: int = 3, repeats: int = 2) -> float:
    """Steps/s: the best of ``repeats`` timed runs (a shared machine only ever slows us)."""
    for _ in range(warmup):
        step()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = max(best, steps / (time.perf_counter() - t0))
    return best


def bare_loop(cfg: TrainerConfig, steps: int) -> float:
    """A hand-written loop: index the dataset, forward, backward, clip, AdamW, schedule."""
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    b, n = cfg.training.global_batch_size, len(data)  # type: ignore[arg-type]
    pos = [0]

    def step() -> None:
        items = [data[(pos[0] + i) % n] for i in range(b)]
        pos[0] += b
        x, y = torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items])
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        loss.item()

    return _rate(step, steps)


def trainer_loop(cfg: TrainerConfig, steps: int) -> float:
    """The trainer's own step path (no checkpoint saves: the checkpoint table has those)."""
    from trainer.train import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg.checkpoint.uri = tmp
        t = Trainer(cfg)
        try:
            t.resume()
            loader = make_loader(t.dataset, cfg, 0, t.micro, 0, 1, t.info.device)
            t.batches = iter(loader)

            def step() -> None:
                loss = t.train_step()
                flags = distributed.sum_across([0.0, loss.item(), 0.0, 0.0], t.info)
                t.progress.update(step=t.step, samples=t.samples, loss=flags[1])

            return _rate(step, steps)
        finally:
            t.close()


def saved_activation_bytes(cfg: TrainerConfig, mode: str) -> tuple[int, int | None]:
    """Bytes autograd keeps for backward in one step, and the CUDA peak (None on CPU)."""
    data = build_data(cfg)
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(cfg, data).to(device)
    apply_activation_checkpointing(model, mode)
    b = cfg.training.global_batch_size
    x = torch.stack([data[i][0] for i in range(b)]).to(device)
    y = torch.stack([data[i][1] for i in range(b)]).to(device)
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x, y)
    loss.backward()
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return saved, peak


@contextlib.contextmanager
def count_all_reduce() -> Iterator[list[int]]:
    """Count bytes passed to torch.distributed.all_reduce (the comm hooks all call it)."""
    counter = [0]
    real = dist.all_reduce

    def counting(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        counter[0] += tensor.numel() * tensor.element_size()
        return real(tensor, *args, **kwargs)

    dist.all_reduce = counting  # type: ignore[assignment]
    try:
        yield counter
    finally:
        dist.all_reduce = real  # type: ignore[assignment]


def comm_hook_figures(cfg: TrainerConfig, hook: str, steps: int) -> tuple[float, float]:
    """(bytes all-reduced per step, steps/s) for DDP with ``hook`` on a 1-rank gloo group."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    data = build_data(cfg)
    torch.manual_seed(0)
    ddp = DDP(build_model(cfg, data))
    if hook == "none":  # the built-in all-reduce runs in C++; the same thing, visible
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    else:
        register_comm_hook(ddp, hook, 4, 2, 0)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    b = cfg.training.global_batch_size
    x = torch.stack([data[i][0] for i in range(b)])
    y = torch.stack([data[i][1] for i in range(b)])

    def step() -> None:
        ddp(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(4):  # DDP re-buckets after its first iteration; PowerSGD starts at 2
        step()
    with count_all_reduce() as counter:
        rate = _rate(step, steps, warmup=0, repeats=1)
    return counter[0] / steps, rate


def _one_rank_group() -> bool:
    if dist.is_initialized():
        return False
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    return True


def run(steps: int, d_model: int, layers: int, seq: int, batch: int) -> None:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    os.environ.setdefault("SPOTWISE_CLOUD", "none")

    def cfg(**kw: Any) -> TrainerConfig:
        c = bench_config(d_model, layers, seq, batch)
        for dotted, value in kw.items():
            section, key = dotted.split("__")
            setattr(getattr(c, section), key, value)
        return c

    print(f"\nmodel: d_model={d_model} layers={layers} seq={seq} batch={batch}; {steps} steps each")
    bare = bare_loop(cfg(), steps)
    rows: list[tuple[str, float]] = [("bare PyTorch loop (same model, same batches)", bare)]
    variants: dict[str, dict[str, Any]] = {
        "trainer (fp32, no technique)": {},
        "trainer + activation ckpt full": {"training__activation_checkpointing": "full"},
        "trainer + activation ckpt selective": {"training__activation_checkpointing": "selective"},
        "trainer + grad accumulation x4": {"training__micro_batch_size": max(1, batch // 4)},
        "trainer + bf16 autocast": {"training__precision": "bf16"},
        "trainer + DataLoader 2 workers": {"data__num_workers": 2},
    }
    for name, kw in variants.items():
        rows.append((name, trainer_loop(cfg(**kw), steps)))
    print(f"\n{'throughput':<46} {'steps/s':>8} {'samples/s':>10}  vs bare")
    for name, rate in rows:
        print(f"{name:<46} {rate:8.2f} {rate * batch:10.1f}  {rate / bare:6.1%}")

    print(f"\n{'activation checkpointing':<30} {'saved for backward':>19} {'CUDA peak':>10}")
    base = None
    for mode in ("none", "selective", "full"):
        saved, peak = saved_activation_bytes(cfg(), mode)
        base = base or saved
        peak_s = f"{peak / 2**20:8.1f}MB" if peak is not None else "  (no GPU)"
        print(f"{mode:<30} {saved / 2**20:14.2f} MiB {peak_s}  {saved / base:6.1%}")

    owns = _one_rank_group()
    try:
        print(f"\n{'DDP comm hook (1-rank gloo)':<30} {'bytes/step':>12} {'steps/s':>8}  vs none")
        plain = None
        for hook in ("none", "fp16", "bf16", "powersgd"):
            if hook == "bf16" and not torch.cuda.is_available():
                print(f"{hook:<30} {'(needs NCCL: CUDA only)':>21}")
                continue
            nbytes, rate = comm_hook_figures(cfg(), hook, steps)
            plain = plain or nbytes
            label = "powersgd (rank 4)" if hook == "powersgd" else hook
            print(f"{label:<30} {nbytes:12,.0f} {rate:8.2f}  {nbytes / plain:6.1%}")
    finally:
        if owns:
            dist.destroy_process_group()
