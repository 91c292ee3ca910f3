"""Per-rank RNG state: capture/restore for exact resume, re-derive when world size changes."""

from __future__ import annotations

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
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def derive(seed: int, step: int, rank: int) -> None:
    """Seed every generator from (seed, step, rank): the rule used at start and after resharding."""
    words = np.random.SeedSequence([seed, step, rank]).generate_state(2, dtype=np.uint32)
    value = (int(words[0]) << 32) | int(words[1])
    random.seed(value)
    np.random.seed(int(words[0]))
    torch.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)
