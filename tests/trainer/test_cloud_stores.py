"""Every checkpoint store keeps the same contract, against real emulators: small files
atomic, conditional writes that only one of two racing writers wins, steps staged and
uploaded, listed, downloaded and deleted."""

from __future__ import annotations

from pathlib import Path

from tests.support.store_emulators import StoreSite
from trainer.storage import METADATA, open_store


def test_small_files_and_versions(store_site: StoreSite, tmp_path: Path) -> None:
    store = open_store(store_site.uri, str(tmp_path / "staging"))
    assert store.read_text("latest") is None
    assert store.read_versioned("latest") == (None, None)
    store.write_text("progress.json", '{"step": 3}\n')
    assert store.read_text("progress.json") == '{"step": 3}\n'
    store.write_text("exits/2.json", "{}\n")  # a name with a folder
    assert store.read_text("exits/2.json") == "{}\n"

    # Create-only: the first writer wins, the second is told so.
    v1 = store.write_if("latest", "step-1\n", None)
    assert v1 is not None
    assert store.write_if("latest", "step-9\n", None) is None
    text, version = store.read_versioned("latest")
    assert (text, version) == ("step-1\n", v1)
    # Compare-and-swap: a writer holding an old version loses.
    v2 = store.write_if("latest", "step-2\n", v1)
    assert v2 is not None and v2 != v1
    assert store.write_if("latest", "step-3\n", v1) is None
    assert store.read_text("latest") == "step-2\n"


def test_steps_round_trip(store_site: StoreSite, tmp_path: Path) -> None:
    store = open_store(store_site.uri, str(tmp_path / "staging"))
    for step in (1, 2):
        local = store.local_dir(step)
        local.mkdir(parents=True, exist_ok=True)
        (local / "__0_0.distcp").write_bytes(b"\x00" * 1000 + bytes([step]))
        store.upload(step, [local / "__0_0.distcp"])
        if step == 2:
            (local / METADATA).write_bytes(b"meta")
            store.upload(step, [local / METADATA])
    assert store.step_dirs() == {1: False, 2: True}
    if not store.is_local:
        import shutil

        shutil.rmtree(store.local_dir(2))
    got = store.download(2)
    assert (got / "__0_0.distcp").read_bytes()[-1] == 2 and (got / METADATA).exists()
    store.delete_step(1)
    assert store.step_dirs() == {2: True}
