"""The trainer's side of the owner fence, on every kind of store (emulators on loopback): a
stale attempt never deletes, writes or points `latest` at a step once another attempt or
another job owns the store, not even when the claim lands between its check and its write;
and `progress.json` is written only by the owner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from scheduler.daemon.checkpoints import CheckpointStores
from tests.support.store_emulators import StoreSite
from trainer import contract
from trainer.checkpoint import CheckpointManager
from trainer.distributed import DistInfo
from trainer.fence import Fence
from trainer.progress import Progress
from trainer.storage import Store, open_store

ONE = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), owns_group=False)


def _state(value: float) -> dict:
    return {"w": torch.full((4,), value)}


@pytest.fixture(autouse=True)
def _job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer learns its job from the environment, as the scheduler starts it."""
    monkeypatch.setenv(contract.ENV_JOB_ID, "j-one")


def _manager(store: Store, attempt: int) -> CheckpointManager:
    return CheckpointManager(store, ONE, keep=5, fence=Fence(store, attempt=attempt))


def test_a_stale_attempt_never_deletes_or_writes_the_owners_step(
    store_site: StoreSite, tmp_path: Path
) -> None:
    uri = store_site.uri
    stores = CheckpointStores()
    stores.claim(uri, 1, "j-one-a1", "j-one")
    stale = _manager(open_store(uri, str(tmp_path / "stale")), attempt=1)
    assert stale.fence is not None and not stale.fence.check()  # it starts as the owner
    stale.save(4, _state(1.0))
    # The daemon gives the store to attempt 2, which saves step 5 (its newest).
    stores.claim(uri, 2, "j-one-a2", "j-one")
    owner = _manager(open_store(uri, str(tmp_path / "owner")), attempt=2)
    assert owner.fence is not None and not owner.fence.check()
    owner.save(5, _state(2.0))
    before = open_store(uri, str(tmp_path / "look")).step_dirs()
    # Attempt 1, behind, saves step 5 too: nothing of the owner's step may go.
    stale.save(5, _state(9.0))
    look = open_store(uri, str(tmp_path / "look"))
    assert stale.fence.tripped and look.step_dirs() == before
    assert (look.read_text(contract.LATEST) or "").strip() == "step-5"
    loaded = _state(0.0)
    owner.load(5, lambda _: loaded)
    assert torch.equal(loaded["w"], torch.full((4,), 2.0))  # the owner's bytes, not 9.0


def test_a_claim_between_the_check_and_the_write_never_lets_the_stale_attempt_advance_latest(
    store_site: StoreSite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = store_site.uri
    stores = CheckpointStores()
    stores.claim(uri, 1, "j-one-a1", "j-one")
    store = open_store(uri, str(tmp_path / "stale"))
    stale = _manager(store, attempt=1)
    assert stale.fence is not None and not stale.fence.check()
    stale.save(1, _state(1.0))
    # The next read of owner.json still says attempt 1; right after it the daemon claims
    # the store for attempt 2: the stale attempt's check passes, its write must not.
    real = store.read_text
    claimed: list[bool] = []

    def read_text(name: str) -> str | None:
        text = real(name)
        if name == contract.OWNER and not claimed:
            claimed.append(True)
            stores.claim(uri, 2, "j-one-a2", "j-one")
        return text

    monkeypatch.setattr(store, "read_text", read_text)
    stale.save(2, _state(2.0))
    assert claimed and stale.fence.tripped
    assert (real(contract.LATEST) or "").strip() == "step-1"


def test_another_job_owning_the_store_fences_the_trainer(tmp_path: Path) -> None:
    uri = (tmp_path / "run").as_uri()
    store = open_store(uri)
    CheckpointStores().claim(uri, 5, "j-two-a5", "j-two")
    # A newer attempt number of another job is still another job's store.
    assert Fence(store, attempt=7).check()  # this is j-one (the environment)


def test_progress_is_written_only_by_the_owner(store_site: StoreSite, tmp_path: Path) -> None:
    uri = store_site.uri
    stores = CheckpointStores()
    stores.claim(uri, 1, "j-one-a1", "j-one")
    store = open_store(uri, str(tmp_path / "s"))
    progress = Progress(store, True, 100, 1, 0.0, Fence(store, attempt=1))
    progress.update(force=True, step=3)
    assert json.loads(store.read_text(contract.PROGRESS) or "{}")["step"] == 3
    stores.claim(uri, 2, "j-one-a2", "j-one")
    progress.update(force=True, step=4)  # the stale attempt: never written
    progress.done()
    assert json.loads(store.read_text(contract.PROGRESS) or "{}")["step"] == 3
    assert store.read_text(contract.DONE) is None
