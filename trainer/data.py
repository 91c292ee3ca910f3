"""Datasets and the resumable loader: the data position is the global sample count.

Any map-style dataset (``__len__`` + ``__getitem__``) works, bundled or the user's own
(``[data] factory = "pkg.module:build"``). The order of samples is a pure function of
(seed, global sample index): sample ``g`` is item ``perm_e[g % N]`` of epoch ``e = g // N``,
``perm_e`` drawn from ``numpy.random.default_rng([seed, e])``. Step ``s`` consumes the global
samples ``[s*B, (s+1)*B)``; rank ``r`` of ``W`` takes the r-th contiguous ``B/W`` slice, cut
into micro-batches for gradient accumulation. So an exact mid-epoch resume needs only the
sample count, for any dataset and any world size, and the loader can use worker processes,
pinned memory and prefetching without losing its place.

Bundled datasets: a character corpus (generated, or a UTF-8 text file) and a memory-mapped
token file (``.bin``, ``uint16``/``uint32``, as nanoGPT and torchtitan write them).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from trainer.config import ConfigError
from trainer.preemption import ignore_stop_signals

if TYPE_CHECKING:
    from trainer.config import TrainerConfig

_SUBJECTS = ["the cat", "a dog", "my robot", "the spot gpu", "our scheduler", "the trainer"]
_VERBS = ["sees", "checkpoints", "chases", "resumes", "prices", "preempts"]
_OBJECTS = ["the moon", "a tensor", "the budget", "one zone", "seven nodes", "the notice"]
TOKEN_DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


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


class WindowDataset(Dataset):
    """Non-overlapping windows of ``seq_len + 1`` tokens: item ``i`` is ``(x, y)``, y = x >> 1."""

    def __init__(self, tokens: np.ndarray | torch.Tensor, seq_len: int, vocab_size: int) -> None:
        self.tokens = tokens
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.windows = (len(tokens) - 1) // seq_len
        if self.windows < 1:
            raise ValueError(f"{len(tokens)} tokens are shorter than one sequence of {seq_len}")

    def __len__(self) -> int:
        return self.windows

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.seq_len
        row = self.tokens[start : start + self.seq_len + 1]
        if not torch.is_tensor(row):  # a memmap slice: copy out of the page cache
            row = torch.from_numpy(np.array(row, dtype=np.int64))
        return row[:-1], row[1:]


def char_dataset(text: str, seq_len: int) -> WindowDataset:
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    ds = WindowDataset(tokens, seq_len, len(chars))
    ds.chars = chars  # type: ignore[attr-defined]
    return ds


def token_file_dataset(path: Path, dtype: str, seq_len: int, vocab_size: int) -> WindowDataset:
    """A flat binary file of token ids, memory-mapped: corpora larger than RAM cost nothing."""
    tokens = np.memmap(path, dtype=TOKEN_DTYPES[dtype], mode="r")
    return WindowDataset(tokens, seq_len, vocab_size)


def write_token_file(path: Path, tokens: np.ndarray | list[int], dtype: str = "uint16") -> None:
    """Write token ids in the ``.bin`` format ``token_file_dataset`` reads."""
    np.asarray(tokens, dtype=TOKEN_DTYPES[dtype]).tofile(path)


def build(cfg: TrainerConfig) -> Dataset:
    """Bundled data factory: ``synthetic``, a ``.bin`` token file, or a UTF-8 text file."""
    d, seq_len = cfg.data, cfg.model.seq_len
    source = d.source
    try:
        if source == "synthetic":
            return char_dataset(synthetic_corpus(d.synthetic_chars), seq_len)
        if source.endswith(".bin"):
            if d.vocab_size < 1:
                raise ConfigError("data.vocab_size is required for a token file (.bin)")
            return token_file_dataset(Path(source), d.token_dtype, seq_len, d.vocab_size)
        text = Path(source).read_text(encoding="utf-8", errors="replace")
        return char_dataset(text, seq_len)
    except (OSError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"data.source {source!r}: {e}") from None


class GlobalBatchSampler(Sampler[list[int]]):
    """This rank's micro-batches of dataset indices, from global sample ``start`` onwards.

    Infinite: the training loop decides when to stop. ``epoch_samples`` (<= len(dataset))
    is the epoch length N; ``shuffle=False`` walks the dataset in order.
    """

    def __init__(
        self,
        epoch_samples: int,
        start: int,
        global_batch: int,
        micro_batch: int,
        rank: int,
        world: int,
        seed: int,
        shuffle: bool = True,
    ) -> None:
        self.n = epoch_samples
        self.start = start
        self.global_batch = global_batch
        self.micro = micro_batch
        self.rank = rank
        self.per_rank = global_batch // world
        self.seed = seed
        self.shuffle = shuffle
        self._epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def index(self, g: int) -> int:
        """Dataset index of global sample ``g``."""
        epoch, i = divmod(g, self.n)
        if not self.shuffle:
            return i
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._epoch = epoch
        return int(self._perm[i])

    def __iter__(self) -> Iterator[list[int]]:
        step_start = self.start
        while True:
            first = step_start + self.rank * self.per_rank
            for m in range(0, self.per_rank, self.micro):
                yield [self.index(g) for g in range(first + m, first + m + self.micro)]
            step_start += self.global_batch


def make_loader(
    dataset: Dataset,
    cfg: TrainerConfig,
    start_sample: int,
    micro_batch: int,
    rank: int,
    world: int,
    device: torch.device,
) -> DataLoader:
    """A DataLoader over ``GlobalBatchSampler``: workers, prefetch, pinned memory on CUDA."""
    d = cfg.data
    n = len(dataset)  # type: ignore[arg-type]
    epoch = min(d.epoch_samples or n, n)
    sampler = GlobalBatchSampler(
        epoch,
        start_sample,
        cfg.training.global_batch_size,
        micro_batch,
        rank,
        world,
        cfg.training.seed,
        d.shuffle,
    )
    # A dedicated generator: iter(DataLoader) otherwise draws a seed from the global torch
    # RNG, which would shift every later random number (dropout) after a resume.
    gen = torch.Generator().manual_seed(cfg.training.seed * 1_000_003 + start_sample + rank)
    kwargs: dict[str, Any] = {}
    if d.num_workers > 0:
        kwargs.update(
            prefetch_factor=d.prefetch_factor,
            persistent_workers=False,
            worker_init_fn=ignore_stop_signals,
        )
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=d.num_workers,
        pin_memory=device.type == "cuda",
        generator=gen,
        **kwargs,
    )


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a batch (tensor, tuple/list or dict of tensors) to the device (async if pinned)."""
    if torch.is_tensor(batch):
        return batch.to(device, non_blocking=device.type == "cuda")
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device) for v in batch)
    return batch
