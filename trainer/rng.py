"""Per-rank RNG state: capture/restore for exact resume, re-derive when world size changes."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch


def capture() -> dict[str, Any]:
    """Snapshot python, numpy, torch CPU and (when present) CUDA generators of this process."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        # Only this rank's own device: saving every visible device's state made a resume
        # with fewer GPUs fail (IndexError) and copied other ranks' generators around.
        state["cuda"] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def restore(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if torch.cuda.is_available() and cuda is not None:
        device = torch.cuda.current_device()
        if isinstance(cuda, list | tuple):  # older checkpoints: every visible device
            if device >= len(cuda):
                return
            cuda = cuda[device]
        torch.cuda.set_rng_state(cuda, device)


def derive(seed: int, step: int, rank: int) -> None:
    """Seed every generator from (seed, step, rank): the rule used at start and after resharding."""
    words = np.random.SeedSequence([seed, step, rank]).generate_state(2, dtype=np.uint32)
    value = (int(words[0]) << 32) | int(words[1])
    random.seed(value)
    np.random.seed(int(words[0]))
    torch.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)


def enable_determinism() -> None:
    """Bitwise-repeatable kernels on one GPU model (slower; errors on ops with no such kernel).

    Across GPU models (A100 vs H100) the math is the same but kernels differ, so losses
    agree closely, not bitwise. CUBLAS_WORKSPACE_CONFIG must be set before cuBLAS starts.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
