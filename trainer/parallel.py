"""Model-side techniques: which blocks to shard/recompute, activation checkpointing, DDP hooks.

"Blocks" are the repeated layers of a model: FSDP2 shards each one and activation
checkpointing recomputes them. A model (or its factory) names them by defining
``shard_units() -> list[nn.Module]``; otherwise the default is the children of the first
non-empty ``nn.ModuleList`` in the model (``blocks`` in the bundled model, ``h`` in GPT-2,
``layers`` in Llama/Mistral/Qwen in ``transformers``).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The model's blocks: ``model.shard_units()`` or the first non-empty ModuleList's items."""
    own = getattr(model, "shard_units", None)
    if callable(own):
        return list(own())
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            return list(module)
    return []


def apply_activation_checkpointing(model: nn.Module, mode: str) -> int:
    """Recompute blocks' activations in backward; ``selective`` = every second block.

    Patches each block's ``forward`` (state-dict keys and FSDP2 hooks stay untouched) with
    non-reentrant ``torch.utils.checkpoint``, which replays the RNG: dropout masks, and so
    losses, are identical with and without. Returns the number of blocks wrapped.
    """
    if mode == "none":
        return 0
    blocks = shard_units(model)
    chosen = blocks if mode == "full" else blocks[1::2]
    for block in chosen:
        block.forward = _checkpointed(block.forward)  # type: ignore[method-assign]
    return len(chosen)


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def compute_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """The model contract: called with the batch (``*tuple`` or ``**dict``), returns a scalar
    loss tensor or an output with ``.loss`` / ``["loss"]`` (Hugging Face style)."""
    if isinstance(batch, dict):
        out = model(**batch)
    elif isinstance(batch, list | tuple):
        out = model(*batch)
    else:
        out = model(batch)
    if torch.is_tensor(out):
        return out
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if not torch.is_tensor(loss):
        raise TypeError(
            f"the model returned {type(out).__name__}; it must return a loss tensor or an "
            "object with .loss (see trainer/README.md, 'Your own model')"
        )
    return loss


# ------------------------------------------------------------------ DDP comm hooks
class CommHook:
    """A registered DDP communication hook and its (checkpointable) state."""

    def __init__(self, name: str, state: Any = None) -> None:
        self.name = name
        self.state = state

    def state_bytes(self) -> bytes | None:
        """PowerSGD's per-rank state (error feedback, warm-start P/Q, iteration, RNG)."""
        if self.name != "powersgd":
            return None
        slots = {s: getattr(self.state, s) for s in self.state.__slots__ if s != "process_group"}
        buf = io.BytesIO()
        torch.save(slots, buf)
        return buf.getvalue()

    def load_state_bytes(self, blob: bytes | None) -> None:
        if self.name != "powersgd" or not blob:
            return
        slots = torch.load(io.BytesIO(blob), weights_only=False)
        for slot, value in slots.items():
            setattr(self.state, slot, value)


def register_comm_hook(
    ddp: nn.Module, name: str, rank: int, start_iter: int, seed: int
) -> CommHook:
    """Register ``fp16`` / ``bf16`` compression or PowerSGD on a DDP module."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if name == "none":
        return CommHook(name)
    if name == "bf16" and not torch.cuda.is_available():
        from trainer.config import ConfigError

        raise ConfigError("parallelism.comm_hook = bf16 needs NCCL (CUDA); use fp16 on gloo/CPU")
    if name in ("fp16", "bf16"):
        hook = (
            default_hooks.fp16_compress_hook if name == "fp16" else default_hooks.bf16_compress_hook
        )
        ddp.register_comm_hook(None, hook)  # type: ignore[operator]
        return CommHook(name)
    state = powerSGD_hook.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=rank,
        start_powerSGD_iter=start_iter,
        min_compression_rate=1.0,
        use_error_feedback=True,
        warm_start=True,
        random_seed=seed,
    )
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)  # type: ignore[operator]
    return CommHook(name, state)
