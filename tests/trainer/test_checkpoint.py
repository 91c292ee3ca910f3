"""Checkpoint stores: the local store contract and an s3:// round trip against moto.

(A checkpoint killed mid-save is tested in test_resume.py, where it shares a process.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.trainer_runs import losses, run_plan, same_params, tiny_args
from trainer.checkpoint import parse_latest
from trainer.storage import LocalStore, open_store


def _args(ckpt: Path | str, out: Path, **kw: object) -> list[str]:
    return tiny_args(
        ckpt,
        debug__metrics_file=out.with_suffix(".jsonl"),
        debug__final_params_file=out.with_suffix(".pt"),
        **kw,
    )


def test_local_store_contract(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/run")
    assert isinstance(store, LocalStore) and store.read_text("latest") is None
    store.write_text("latest", "step-3\n")
    assert parse_latest(store.read_text("latest")) == 3
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["latest"]  # no temp files left
    (tmp_path / "run" / "step-3").mkdir()
    (tmp_path / "run" / "step-3" / ".metadata").touch()
    (tmp_path / "run" / "step-4").mkdir()
    assert store.step_dirs() == {3: True, 4: False}
    assert parse_latest("garbage") is None
    with pytest.raises(ValueError, match="unsupported"):
        open_store("ftp://bucket/x")


@pytest.fixture(scope="module")
def moto_s3():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.timeout(180)
def test_s3_round_trip(tmp_path: Path, moto_s3: str) -> None:
    import boto3

    creds = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SPOTWISE_S3_ENDPOINT_URL": moto_s3,
    }
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_s3,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="ckpt")
    uri, ref, res = "s3://ckpt/jobs/j1", tmp_path / "ref", tmp_path / "res"
    staging = dict(checkpoint__staging_dir=tmp_path / "staging")
    plan = [
        _args(ref, ref),
        _args(uri, res, debug__sigterm_at_step=7, checkpoint__async_save=True, **staging),
        _args(uri, res, **staging),
    ]
    codes, proc = run_plan(plan, tmp_path, **creds)
    assert codes == [0, 75, 0], proc.stderr[-3000:]
    assert "resumed from step-7" in proc.stderr
    assert losses(res.with_suffix(".jsonl")) == losses(ref.with_suffix(".jsonl"))
    assert same_params(ref.with_suffix(".pt"), res.with_suffix(".pt"))

    def get(key: str) -> str:
        return s3.get_object(Bucket="ckpt", Key=f"jobs/j1/{key}")["Body"].read().decode()

    assert get("latest").strip() == "step-16"
    assert json.loads(get("DONE"))["step"] == 16
    doc = json.loads(get("progress.json"))
    assert doc["step"] == 16 and doc["state"] == "done" and doc["last_checkpoint_step"] == 16
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix="jobs/j1/")["Contents"]]
    steps = sorted({k.split("/")[2] for k in keys if k.split("/")[2].startswith("step-")})
    assert steps == ["step-15", "step-16"]
    assert "jobs/j1/step-16/.metadata" in keys
    # The instance disk is scratch: nothing is left in staging once uploads are durable.
    assert not any(p.is_file() for p in (tmp_path / "staging").rglob("*"))
