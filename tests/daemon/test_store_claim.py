"""The first claim of a local store (created in place, no temp file) leaves what the general
claim (read, temp file, rename) leaves, and every case it does not own falls through to it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import FencedStores
from scheduler.state.lease import LeaseLost
from trainer import contract


def _general(stores: CheckpointStores, uri: str, *args: object, sync: bool) -> None:
    """The general path alone: the fast path declines."""
    real = stores._claim_new
    stores._claim_new = lambda *a, **k: False  # type: ignore[method-assign]
    try:
        stores.claim(uri, *args, sync=sync)  # type: ignore[arg-type]
    finally:
        stores._claim_new = real  # type: ignore[method-assign]


@pytest.mark.parametrize("sync", [True, False])
def test_a_new_store_gets_the_files_the_general_claim_writes(tmp_path: Path, sync: bool) -> None:
    fast, slow = CheckpointStores(), CheckpointStores()
    a, b = tmp_path / "stores" / "job-a", tmp_path / "stores" / "job-b"
    fast.claim(a.as_uri(), 3, "job-a-a3", "job-a", sync=sync)
    _general(slow, b.as_uri(), 3, "job-a-a3", "job-a", sync=sync)
    assert sorted(os.listdir(a)) == sorted(os.listdir(b)) == [contract.OWNER]  # no temp left
    docs = [json.loads((d / contract.OWNER).read_text()) for d in (a, b)]
    for doc in docs:
        doc.pop("written_at")
    assert docs[0] == docs[1] == {"attempt": 3, "attempt_id": "job-a-a3", "job_id": "job-a"}
    for attr in ("st_mode", "st_uid"):
        assert getattr((a / contract.OWNER).stat(), attr) == getattr(
            (b / contract.OWNER).stat(), attr
        )
        assert getattr(a.stat(), attr) == getattr(b.stat(), attr)
    assert stat.S_IMODE((a / contract.OWNER).stat().st_mode) == 0o600
    assert (a / contract.OWNER).read_text().endswith("\n")


def test_an_existing_store_takes_the_general_path_and_its_fence(tmp_path: Path) -> None:
    stores = CheckpointStores()
    uri = (tmp_path / "job").as_uri()
    stores.claim(uri, 2, "a-2", "j-1")  # new: created in place
    with pytest.raises(StoreError, match="owned by attempt 2"):
        stores.claim(uri, 1, "a-1", "j-1")  # exists: read, and the fence holds
    stores.claim(uri, 3, "a-3", "j-1")
    assert contract.owner_attempt(stores.read(uri, contract.OWNER)) == 3


@pytest.mark.parametrize("leftover", ["", '{"attempt": 4, "attem'])
def test_what_a_crash_inside_a_first_claim_leaves_is_claimed_again(
    tmp_path: Path, leftover: str
) -> None:
    """A crash after the mkdir (or halfway through the write) leaves an empty directory or a
    short owner.json: read as no owner, replaced by the next claim."""
    stores = CheckpointStores()
    store = tmp_path / "job"
    store.mkdir()
    if leftover:
        (store / contract.OWNER).write_text(leftover)
    stores.claim(store.as_uri(), 1, "a-1", "j-1")
    assert contract.owner_attempt((store / contract.OWNER).read_text()) == 1


def test_a_first_claim_needs_the_lease(tmp_path: Path) -> None:
    class Lost:
        def check(self, s: object) -> None:  # pragma: no cover - no database here
            pass

        def guard(self) -> None:
            raise LeaseLost("the lease was taken over")

    store = tmp_path / "job"
    with pytest.raises(StoreError, match="taken over"):
        FencedStores(Lost()).claim(store.as_uri(), 1, "a-1", "j-1")
    assert not store.exists()  # nothing created by a stale daemon


def test_a_first_claim_that_cannot_write_says_where(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(StoreError, match=r"cannot write .*owner\.json"):
        CheckpointStores().claim((tmp_path / "a-file" / "job").as_uri(), 1, "a-1", "j-1")


def test_a_new_store_is_created_without_a_rename_and_an_existing_one_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is taken for a new store (a claim that renamed would fail here), and
    only for a new one: claiming an existing store replaces owner.json atomically."""
    renames: list[str] = []

    def replace(src: str, dst: str) -> None:
        renames.append(str(dst))
        real_replace(src, dst)

    real_replace = os.replace
    monkeypatch.setattr(os, "replace", replace)
    stores = CheckpointStores()
    uri = (tmp_path / "stores" / "job").as_uri()
    stores.claim(uri, 1, "a-1", "j-1")
    assert renames == []
    stores.claim(uri, 2, "a-2", "j-1")
    # owner.json replaced, then `latest` rewritten so attempt 1 can no longer advance it.
    job = tmp_path / "stores" / "job"
    assert renames == [str(job / contract.OWNER), str(job / contract.LATEST)]


@pytest.mark.parametrize("sync", [True, False])
def test_a_first_claim_is_fsynced_unless_the_caller_syncs_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """The file, the store's directory entry and the root's: all fsynced with sync=True;
    with sync=False none (the launch pass's one sync(2) makes them durable)."""
    synced: list[tuple[int, int]] = []  # (st_dev, st_ino) of each fsynced descriptor
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "stores"
    root.mkdir()
    CheckpointStores().claim((root / "job").as_uri(), 1, "a-1", "j-1", sync=sync)
    want = {
        (p.stat().st_dev, p.stat().st_ino)
        for p in (root / "job" / contract.OWNER, root / "job", root)
    }
    assert set(synced) == (want if sync else set())


def test_a_first_claim_fences_the_older_attempts_trainer(tmp_path: Path) -> None:
    """What the fence is for: after attempt 2's first claim of a store, attempt 1's trainer
    stops (never advances `latest`), attempt 2's goes on, and attempt 1 cannot be claimed
    back onto the store."""
    from trainer.fence import Fence
    from trainer.storage import open_store

    uri = (tmp_path / "job").as_uri()
    stores = CheckpointStores()
    stores.claim(uri, 2, "j-1-a2", "j-1", sync=False)
    assert Fence(open_store(uri), attempt=1).check() is True
    assert Fence(open_store(uri), attempt=2).check() is False
    with pytest.raises(StoreError, match="owned by attempt 2"):
        stores.claim(uri, 1, "j-1-a1", "j-1")
    assert contract.owner_attempt((tmp_path / "job" / contract.OWNER).read_text()) == 2


def test_a_claim_of_a_store_whose_root_is_missing_creates_it(tmp_path: Path) -> None:
    uri = (tmp_path / "a" / "b" / "job").as_uri()
    CheckpointStores().claim(uri, 1, "a-1", "j-1")
    assert contract.owner_attempt((tmp_path / "a" / "b" / "job" / contract.OWNER).read_text()) == 1


def test_a_first_claim_of_a_relative_path_is_fsynced_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    CheckpointStores().claim("job", 1, "a-1", "j-1", sync=True)
    assert contract.owner_attempt((tmp_path / "job" / contract.OWNER).read_text()) == 1
