"""torch.distributed from torchrun's environment: NCCL with CUDA, gloo otherwise; DDP or FSDP2."""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from trainer.config import ConfigError
from trainer.parallel import shard_units

log = logging.getLogger("trainer.distributed")


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool
    """True when we created the default process group (and must destroy it)."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init(device_pref: str = "auto") -> DistInfo:
    """Join torchrun's group if launched by it; else run as one plain process."""
    use_cuda = torch.cuda.is_available() and device_pref != "cpu"
    if device_pref == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training.device = cuda but CUDA is not available")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        index = cuda_index(local_rank, torch.cuda.device_count())
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        device = torch.device("cpu")
    owns = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if use_cuda else "gloo",
            device_id=device if use_cuda else None,
        )
        owns = True
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistInfo(rank, world, local_rank, device, owns)


def cuda_index(local_rank: int, visible: int) -> int:
    """The CUDA device of this rank: LOCAL_RANK, or 0 when each process sees only its own GPU.

    Launchers that set CUDA_VISIBLE_DEVICES per process leave one visible device, so
    ``set_device(LOCAL_RANK)`` would fail with "invalid device ordinal" on rank 1.
    """
    if local_rank < visible:
        return local_rank
    if visible == 1:
        log.info(
            "LOCAL_RANK=%d sees one GPU (per-process CUDA_VISIBLE_DEVICES): cuda:0", local_rank
        )
        return 0
    shown = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    raise ConfigError(
        f"LOCAL_RANK={local_rank} but only {visible} CUDA devices are visible "
        f"(CUDA_VISIBLE_DEVICES={shown}): show every rank all of the node's GPUs "
        "(torchrun's default), or exactly one GPU per process"
    )


def wrap(model: nn.Module, info: DistInfo, mode: str) -> nn.Module:
    """DDP (replicated) or FSDP2 (sharded params, grads and optimizer state)."""
    if not info.enabled:
        return model
    if mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(info.device.type, (info.world_size,))
        for block in shard_units(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [info.device.index] if info.device.type == "cuda" else None
    return DDP(model, device_ids=ids)


def sum_across(values: list[float], info: DistInfo) -> list[float]:
    """One small all-reduce per step carrying every per-step agreement (notice, loss, timers)."""
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def barrier(info: DistInfo, group: dist.ProcessGroup | None = None) -> None:
    if info.enabled:
        dist.barrier(group=group)


def shutdown(info: DistInfo) -> None:
    """Destroy the group we created; collect DDP objects first (avoids a known exit hang)."""
    if info.owns_group and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
