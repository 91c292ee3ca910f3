"""Every checkpoint store keeps the same contract, against real emulators: small files
atomic, conditional writes that only one of two racing writers wins, steps staged and
uploaded, listed, downloaded and deleted; and the trainer resumes exactly from each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.store_emulators import StoreSite, site
from tests.support.trainer_runs import losses, run_plan, same_params, tiny_args
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


@pytest.mark.timeout(280)
def test_two_ranks_resume_exactly_across_a_sigterm_on_every_cloud_store(tmp_path: Path) -> None:
    """`python -m trainer` on 2 ranks (gloo) with its checkpoints in S3, GCS and Azure Blob
    Storage (emulated): a real SIGTERM at step 6 (exit 75), then a resume from the store that
    ends with exactly the losses and parameters of an uninterrupted run. One torchrun job
    runs the whole plan, so the process group starts once."""
    sites = [site(kind, tmp_path / kind) for kind in ("s3", "gs", "az")]
    env: dict[str, str] = {}
    for found in sites:
        env.update(found.env)

    def args(uri: str, metrics: Path, **kw: object) -> list[str]:
        return tiny_args(
            uri,
            debug__metrics_file=metrics,
            debug__final_params_file=metrics.with_suffix(".pt"),
            checkpoint__staging_dir=tmp_path / "staging",
            **kw,
        )

    ref = tmp_path / "ref.jsonl"
    plan = [args(str(tmp_path / "ref-ckpt"), ref)]
    for found in sites:
        metrics = tmp_path / f"{found.kind}.jsonl"
        plan += [args(found.uri, metrics, debug__sigterm_at_step=6), args(found.uri, metrics)]
    codes, proc = run_plan(plan, tmp_path, nproc=2, timeout=260, **env)
    assert codes == [0] + [75, 0] * len(sites), proc.stderr[-3000:]
    for found in sites:
        metrics = tmp_path / f"{found.kind}.jsonl"
        assert losses(metrics) == losses(ref), found.kind
        assert same_params(ref.with_suffix(".pt"), metrics.with_suffix(".pt")), found.kind
        for k, v in found.env.items():
            os.environ[k] = v
        store = open_store(found.uri, str(tmp_path / "look"))
        doc = json.loads(store.read_text("progress.json") or "{}")
        assert doc["step"] == 16 and doc["state"] == "done", found.kind
        assert (store.read_text("latest") or "").strip() == "step-16"
        assert sorted(store.step_dirs()) == [15, 16]  # keep=2, pruned in the store
