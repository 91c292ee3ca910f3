"""No GPU here: check that the GPU paths are the ones *selected* when CUDA is present."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from trainer import distributed
from trainer.amp import Precision


@pytest.mark.parametrize(("cuda", "backend"), [(True, "nccl"), (False, "gloo")])
def test_backend_follows_cuda(monkeypatch, cuda, backend):
    seen: dict = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: seen.setdefault("device", i))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: seen.update(kw))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = distributed.init("auto")
    assert seen["backend"] == backend
    assert info.device.type == ("cuda" if cuda else "cpu")
    if cuda:
        assert seen["device"] == 1 and seen["device_id"] == torch.device("cuda", 1)


def test_fp16_scaler_uses_the_training_device():
    assert Precision("fp16", torch.device("cpu")).scaler._device == "cpu"
    with pytest.warns(UserWarning):  # a CPU-only build disables the CUDA scaler, loudly
        assert Precision("fp16", torch.device("cuda", 0)).scaler._device == "cuda"
    assert Precision("bf16", torch.device("cpu")).scaler is None
