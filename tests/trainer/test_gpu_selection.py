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
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if cuda else 0)
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


# ---------------------------------------------------------------- GPU-path fixes (mocked)
def test_cuda_device_under_per_process_visible_devices(monkeypatch) -> None:
    from trainer.config import ConfigError

    assert distributed.cuda_index(3, 8) == 3
    assert distributed.cuda_index(3, 1) == 0  # each process sees only its own GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match=r"LOCAL_RANK=3 but only 2 CUDA devices .*=0,1"):
        distributed.cuda_index(3, 2)


def test_rng_saves_and_restores_only_this_ranks_cuda_device(monkeypatch) -> None:
    from trainer import rng

    calls: list[tuple] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda d: calls.append(("get", d)) or d)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, d: calls.append(("set", s, d)))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("all devices"))
    state = rng.capture()
    assert state["cuda"] == 1 and calls == [("get", 1)]
    rng.restore(state)
    assert calls[-1] == ("set", 1, 1)
    rng.restore({**state, "cuda": ["s0", "s1", "s2"]})  # an old all-devices checkpoint
    assert calls[-1] == ("set", "s1", 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 5)  # fewer GPUs than saved
    rng.restore({**state, "cuda": ["s0", "s1"]})  # no IndexError
    assert calls[-1] == ("set", "s1", 1)


@pytest.mark.parametrize(("cc", "warns"), [((7, 0), True), ((7, 5), True), ((8, 0), False)])
def test_bf16_on_old_gpus_suggests_fp16(monkeypatch, cc, warns) -> None:
    from trainer.amp import bf16_warning

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "Tesla V100")
    message = bf16_warning("bf16", torch.device("cuda", 0))
    assert (message is not None) == warns
    if warns:
        assert "use --precision fp16" in message and f"{cc[0]}.{cc[1]} < 8.0" in message
    assert bf16_warning("fp16", torch.device("cuda", 0)) is None
    assert bf16_warning("bf16", torch.device("cpu")) is None


def test_async_staging_waits_on_a_cuda_event_in_the_staging_thread(monkeypatch) -> None:
    """The copy waits for the compute stream via an event recorded at save time, on the
    staging thread, not via a host sync on the training thread."""
    import threading

    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    from trainer.checkpoint import EventStager

    log: list[tuple[str, str]] = []

    class FakeEvent:
        def record(self) -> None:
            log.append(("record", threading.current_thread().name))

        def synchronize(self) -> None:
            log.append(("synchronize", threading.current_thread().name))

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    real_stage = DefaultStager._stage
    monkeypatch.setattr(
        DefaultStager,
        "_stage",
        lambda self, sd, **kw: (
            log.append(("copy", threading.current_thread().name)) or real_stage(self, sd, **kw)
        ),
    )
    stager = EventStager(StagingOptions(False, False, True, False))
    main = threading.current_thread().name
    staged = stager.stage({"w": torch.ones(3)}).result()
    stager.close()
    assert torch.equal(staged["w"], torch.ones(3))
    assert [what for what, _ in log] == ["record", "synchronize", "copy"]
    assert log[0][1] == main and log[1][1] != main and log[1][1] == log[2][1]


def test_deterministic_flag_enables_deterministic_kernels(monkeypatch) -> None:
    from trainer import rng

    seen: list[bool] = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on: seen.append(on))
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    rng.enable_determinism()
    import os

    assert seen == [True] and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.backends.cudnn.benchmark is False
