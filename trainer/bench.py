"""Benchmark: ``python -m trainer.bench [--only all|checkpoint|throughput] [--size-gb 1.0]``.

Throughput (``trainer/bench_throughput.py``): the trainer against a bare loop and each
technique on/off. Checkpoints (below):
Measures, on one disk and in one run, the trainer's own checkpoint path against a baseline:
raw write bandwidth (write + fsync of the same number of bytes), sync save, async save's
blocking time, load time, and the time from an interruption notice to a durable checkpoint
(``latest`` moved) while an async save is in flight. Not a timed test: it prints a table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn

from trainer.checkpoint import CheckpointManager, ModelOptimState
from trainer.distributed import DistInfo
from trainer.preemption import FileWatcher
from trainer.storage import LocalStore

CHUNK = 16 * 1024 * 1024  # fp32 elements per layer: 64 MiB


def build_state(size_bytes: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model whose params + AdamW moments (3 x fp32) add up to ``size_bytes``."""
    n_params = max(1, size_bytes // (3 * 4))
    sizes = [CHUNK] * (n_params // CHUNK) + ([n_params % CHUNK] if n_params % CHUNK else [])
    model = nn.ParameterList(nn.Parameter(torch.randn(n) * 0.01) for n in sizes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # materialize exp_avg / exp_avg_sq
    opt.zero_grad(set_to_none=True)
    return model, opt


def state_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> int:
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    for s in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in s.values() if torch.is_tensor(v))
    return n


def raw_write(directory: Path, tensors: list[torch.Tensor]) -> float:
    """Baseline: write the same bytes to one file and fsync; seconds."""
    path = directory / "raw.bin"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for t in tensors:
            f.write(t.detach().numpy().data)
        f.flush()
        os.fsync(f.fileno())
    elapsed = time.perf_counter() - t0
    path.unlink()
    return elapsed


def touch_params(model: nn.Module) -> None:
    """Stand-in for a training step: mutate the weights in place."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.0)


def notice_to_durable(
    mgr: CheckpointManager, model: nn.Module, opt: torch.optim.Optimizer, scratch: Path, step: int
) -> float:
    """An async save is in flight when the notice arrives; time until ``latest`` is durable."""
    notice = scratch / "notice.json"
    watcher = FileWatcher(notice, poll_interval=0.05)
    watcher.start()
    mgr.save(step, {"app": ModelOptimState(model, opt)}, async_save=True)
    t_notice = 0.0

    def deliver() -> None:
        nonlocal t_notice
        t_notice = time.perf_counter()
        notice.write_text('{"action": "terminate"}')

    threading.Timer(0.05, deliver).start()
    while not watcher.seen:  # the training loop: a step, then the boundary check
        touch_params(model)
        time.sleep(0.01)
    mgr.wait()
    mgr.save(step + 1, {"app": ModelOptimState(model, opt)}, async_save=False)
    elapsed = time.perf_counter() - t_notice
    watcher.stop()
    notice.unlink()
    return elapsed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m trainer.bench", description=__doc__)
    ap.add_argument("--size-gb", type=float, default=1.0, help="checkpoint state size (GB)")
    ap.add_argument("--dir", type=Path, default=None, help="disk to test (default: temp dir)")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions; medians are shown")
    ap.add_argument(
        "--only", choices=("all", "checkpoint", "throughput"), default="all",
        help="which tables to print (default: all)",
    )  # fmt: skip
    ap.add_argument("--steps", type=int, default=20, help="throughput: timed steps per row")
    ap.add_argument(
        "--model", default="128,4,128,16", help="throughput: d_model,layers,seq_len,batch"
    )
    args = ap.parse_args(argv)
    if args.only in ("all", "throughput"):
        from trainer.bench_throughput import run

        d_model, layers, seq, batch = (int(v) for v in args.model.split(","))
        run(args.steps, d_model, layers, seq, batch)
    if args.only == "throughput":
        return

    base = Path(tempfile.mkdtemp(prefix="spotwise-bench-", dir=args.dir))
    try:
        model, opt = build_state(int(args.size_gb * 1e9))
        nbytes = state_bytes(model, opt)
        tensors = list(model.parameters()) + [
            v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()
        ]
        info = DistInfo(
            rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), owns_group=False
        )
        mgr = CheckpointManager(LocalStore(base / "ckpt"), info, keep=2)
        print(f"state: {nbytes / 1e9:.3f} GB in {len(tensors)} tensors; dir: {base}")

        raw, sync, blocking, staging, total, load = [], [], [], [], [], []
        step = 0
        for _ in range(args.repeats):
            # os.sync() before each timed part: no measurement pays for another's dirty pages.
            os.sync()
            raw.append(raw_write(base, tensors))
            os.sync()
            step += 1
            t0 = time.perf_counter()
            mgr.save(step, {"app": ModelOptimState(model, opt)}, async_save=False)
            sync.append(time.perf_counter() - t0)
            step += 1
            os.sync()
            t0 = time.perf_counter()
            mgr.save(step, {"app": ModelOptimState(model, opt)}, async_save=True)
            blocking.append(time.perf_counter() - t0)
            mgr.wait_staging()  # worst case: no forward/backward to overlap the copy with
            staging.append(time.perf_counter() - t0)
            touch_params(model)  # training continues while the write happens
            mgr.wait()
            total.append(time.perf_counter() - t0)
            os.sync()
            t0 = time.perf_counter()
            mgr.load(step, lambda _w: {"app": ModelOptimState(model, opt)})
            load.append(time.perf_counter() - t0)
        step += 1
        os.sync()
        n2d = notice_to_durable(mgr, model, opt, base, step)
        mgr.close()

        med = statistics.median
        gb = nbytes / 1e9
        rows = [
            ("raw write+fsync (baseline)", med(raw), gb / med(raw), "1.00 x raw bw"),
            ("sync save", med(sync), gb / med(sync), f"{med(raw) / med(sync):.2f} x raw bw"),
            (
                "async save: save() blocks",
                med(blocking),
                None,
                f"{med(blocking) / med(sync):.1%} of sync",
            ),
            (
                "async save: staging copy",
                med(staging),
                None,
                f"{med(staging) / med(sync):.1%} of sync (stall if no overlap)",
            ),
            (
                "async save: until durable",
                med(total),
                gb / med(total),
                f"{med(raw) / med(total):.2f} x raw bw",
            ),
            ("load", med(load), gb / med(load), ""),
            ("notice -> durable ckpt", n2d, None, "async in flight at notice"),
        ]
        print(f"\n{'measure':<28} {'seconds':>8} {'GB/s':>7}  ratio")
        for name, secs, bw, ratio in rows:
            bw_s = f"{bw:7.2f}" if bw else "      -"
            print(f"{name:<28} {secs:8.3f} {bw_s}  {ratio}")
        print(
            f"\n(medians of {args.repeats}; the first async staging copy took "
            f"{staging[0]:.3f}s including allocating the reusable staging buffers)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
