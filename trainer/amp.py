"""Mixed precision: autocast for bf16/fp16, a GradScaler for fp16 (its state is checkpointed).

On CPU we use ``torch.autocast("cpu")`` and ``GradScaler("cpu")`` so tests exercise the real
scaler (``GradScaler("cuda")`` on a CPU-only build silently disables itself).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """One object per run: the autocast context and an optional GradScaler."""

    def __init__(
        self,
        precision: str,
        device: torch.device,
        init_scale: float = 65536.0,
        growth_interval: int = 2000,
    ) -> None:
        self.name = precision
        self.device_type = device.type
        self.dtype = DTYPES[precision]
        self.scaler: torch.amp.GradScaler | None = None
        if precision == "fp16":
            self.scaler = torch.amp.GradScaler(
                self.device_type, init_scale=init_scale, growth_interval=growth_interval
            )

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.name == "fp32":
            yield
            return
        with torch.autocast(self.device_type, dtype=self.dtype):
            yield

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], clip: float):
        """Unscale, clip, step, update. A skipped fp16 step (inf grads) is the scaler's call."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def bf16_warning(precision: str, device: torch.device) -> str | None:
    """Why bf16 is a poor choice on this GPU (compute capability < 8.0: V100, T4), or None."""
    if precision != "bf16" or device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    if major >= 8:
        return None
    name = torch.cuda.get_device_name(device)
    return (
        f"--precision bf16 on {name} (compute capability {major}.{minor} < 8.0): no native "
        "bf16 math, it is emulated and slow; use --precision fp16 (loss scaling included)"
    )
