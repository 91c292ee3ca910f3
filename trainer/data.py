"""Deterministic text data addressed by a global sample index.

The stream of samples is a pure function of (seed, global sample index): sample ``g`` is the
window ``perm_epoch[g % N]`` of epoch ``g // N``, where ``perm_epoch`` is a permutation drawn
from ``numpy.random.default_rng([seed, epoch])``. Step ``s`` consumes the global samples
``[s*B, (s+1)*B)`` (``B`` = global batch) and rank ``r`` of ``W`` takes the r-th contiguous
slice. So the data position is just the global sample count and survives any world-size
change. No DataLoader, no global-RNG draws (a DataLoader iterator consumes one).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from trainer.config import DataConfig

_SUBJECTS = ["the cat", "a dog", "my robot", "the spot gpu", "our scheduler", "the trainer"]
_VERBS = ["sees", "checkpoints", "chases", "resumes", "prices", "preempts"]
_OBJECTS = ["the moon", "a tensor", "the budget", "one zone", "seven nodes", "the notice"]


def synthetic_corpus(n_chars: int, seed: int = 1234) -> str:
    """Generate learnable text: simple sentences and correct sums (a known structure)."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < n_chars:
        if rng.random() < 0.5:
            a, b = rng.randrange(100), rng.randrange(100)
            s = f"{a}+{b}={a + b}. "
        else:
            s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}. "
        parts.append(s)
        total += len(s)
    return "".join(parts)[:n_chars]


class TextData:
    """Character corpus cut into non-overlapping windows of ``seq_len + 1`` characters."""

    def __init__(self, cfg: DataConfig, seq_len: int, seed: int) -> None:
        if cfg.source == "synthetic":
            text = synthetic_corpus(cfg.synthetic_chars)
        else:
            text = Path(cfg.source).read_text(encoding="utf-8", errors="replace")
        self.chars = sorted(set(text))
        lookup = {c: i for i, c in enumerate(self.chars)}
        self.tokens = torch.tensor([lookup[c] for c in text], dtype=torch.long)
        self.seq_len = seq_len
        self.seed = seed
        windows = (len(self.tokens) - 1) // seq_len
        self.epoch_samples = min(cfg.epoch_samples or windows, windows)
        if self.epoch_samples < 1:
            raise ValueError(f"data source {cfg.source!r} is shorter than one sequence")
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def _window(self, g: int) -> int:
        epoch, i = divmod(g, self.epoch_samples)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.epoch_samples)
            self._perm_epoch = epoch
        return int(self._perm[i])

    def batch(
        self, start_sample: int, global_batch: int, rank: int, world: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of the global batch that begins at ``start_sample``."""
        per_rank = global_batch // world
        first = start_sample + rank * per_rank
        rows = [
            self.tokens[w * self.seq_len : w * self.seq_len + self.seq_len + 1]
            for w in (self._window(g) for g in range(first, first + per_rank))
        ]
        seqs = torch.stack(rows)
        return seqs[:, :-1], seqs[:, 1:]
