"""A job whose checkpoints live in Google Cloud Storage or Azure Blob Storage (emulated on
loopback: fake-gcs-server, Azurite), run by the real daemon on the local market: it is
interrupted, resumes from its checkpoint in that store on the next attempt and finishes with
exactly the losses of an uninterrupted run; the daemon reads its progress and DONE there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from providers.local import LocalMarket, LocalSettings
from tests.support.store_emulators import set_env, site
from tests.system.test_e2e_local import Spotwise
from trainer.storage import open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
STEPS = 40
LOOP = ["-m", "trainer.examples.own_loop", "--steps", str(STEPS), "--save-every", "5"]


def _losses(path: Path) -> dict[int, set[float]]:
    out: dict[int, set[float]] = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        out.setdefault(doc["step"], set()).add(doc["loss"])
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, set[float]]:
    """The losses of one uninterrupted run (on a local store: losses do not depend on it)."""
    tmp = tmp_path_factory.mktemp("reference")
    env = dict(os.environ, SPOTWISE_CHECKPOINT_URI=str(tmp / "ckpt"))
    for k in ("SPOTWISE_ATTEMPT", "SPOTWISE_JOB_ID", "SPOTWISE_NOTICE_FILE", "SPOTWISE_CLOUD"):
        env.pop(k, None)
    out = tmp / "losses.jsonl"
    subprocess.run([sys.executable, *LOOP, "--losses", str(out)], check=True, env=env, timeout=120)
    return _losses(out)


@pytest.mark.parametrize("kind", ["gs", "az"])
def test_a_job_on_a_cloud_store_is_interrupted_and_resumes_exactly(
    kind: str,
    reference: dict[int, set[float]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = site(kind, tmp_path)
    set_env(store, monkeypatch)  # the daemon, and through it the job, reach the emulator
    sw = Spotwise(tmp_path)
    losses = tmp_path / "scheduled.jsonl"
    job = tmp_path / "own.toml"
    argv = ", ".join(json.dumps(a) for a in ["python", *LOOP, "--step-delay", "0.15"])
    job.write_text(
        f'name = "own-{kind}"\ngpus = "V100:1"\ngpu_hours = 1\n'
        f'checkpoint = "{store.uri}"\n'
        f'command = [{argv}, "--losses", "{losses}"]\n'
    )
    sw.start()
    try:
        job_id = sw.cli("submit", str(job))["id"]
        row = sw.wait_job(job_id, lambda r: (r["progress_step"] or 0) >= 12, timeout=120)
        market = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1))
        assert market.interrupt(row["instance_id"])
        row = sw.wait_job(job_id, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=150)
    finally:
        if sw.daemon and sw.daemon.poll() is None:
            sw.stop()
    assert row["state"] == "SUCCEEDED" and row["recoveries"] == 1, row
    ends = [a["end_reason"] for a in sw.cli("show", job_id)["attempts"]]
    assert ends == ["interrupted", "finished"]
    got = _losses(losses)
    assert set(got) == set(range(1, STEPS + 1))
    # Bit-exact: every step, run once or twice, gave the uninterrupted run's loss; and the
    # second attempt resumed from the checkpoint in the store (at most the steps after it
    # ran twice, never the 12 or more a start from step 0 would repeat).
    assert got == {s: reference[s] for s in got}
    assert len(losses.read_text().splitlines()) < STEPS + 5
    # Everything is in the cloud store, written by this job: nothing on the local disk.
    remote = open_store(store.uri, str(tmp_path / "staging"))
    done = json.loads(remote.read_text("DONE") or "{}")
    assert done["job_id"] == job_id and done["step"] == STEPS
    assert json.loads(remote.read_text("owner.json") or "{}")["attempt"] == 2
    assert (remote.read_text("latest") or "").strip() == f"step-{STEPS}"
    assert not (tmp_path / "ckpt" / job_id).exists()
