"""Test fast path: run several trainer invocations in one process (plain or under torchrun).

Importing torch and forming a process group dominates a tiny run, so the resume matrix runs
all its invocations in one process per world size. Between invocations every global RNG is
scrambled, so a resume that forgot to restore some state cannot pass by inheriting it.
Usage: multirun.py PLAN.json RESULTS.json; PLAN is a list of argv lists.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from trainer.__main__ import main


def scramble() -> None:
    junk = int.from_bytes(os.urandom(4), "little")
    random.seed(junk)
    np.random.seed(junk)
    torch.manual_seed(junk)


def run_plan(plan: list[list[str]], results_path: str) -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    codes: list[int] = []
    for argv in plan:
        scramble()
        t0 = time.perf_counter()
        codes.append(main(argv))
        print(f"multirun: exit {codes[-1]} in {time.perf_counter() - t0:.2f}s", file=sys.stderr)
        if rank == 0:  # written after each run: a SIGKILLed plan still reports what ran
            with open(results_path, "w") as f:
                json.dump(codes, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run_plan(json.load(f), sys.argv[2])
