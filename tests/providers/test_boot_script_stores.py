"""The boot script's own exit record (used when the image has no trainer) reaches every kind
of store, names the job, and takes the instance's own identity from its metadata server."""

from __future__ import annotations

import pytest

from providers.base import LaunchRejected
from providers.boot_script import record_lines


def _env(uri: str) -> dict[str, str]:
    return {"SPOTWISE_CHECKPOINT_URI": uri, "SPOTWISE_ATTEMPT": "3", "SPOTWISE_JOB_ID": "j-abc"}


def test_gs_and_az_records_are_put_with_the_instances_own_token() -> None:
    gs, ok = record_lines(_env("gs://bkt/ckpt/run 1"), "gcp", 3, 5)
    assert ok and '"job_id": "j-abc"' in gs
    assert "computeMetadata/v1/instance/service-accounts/default/token" in gs
    assert "'Metadata-Flavor: Google'" in gs
    assert "storage.googleapis.com/upload/storage/v1/b/bkt/o?uploadType=media" in gs
    assert "name=ckpt%2Frun%201%2Fexits%2F3.json" in gs
    az, ok = record_lines(_env("az://ckpt@acct/runs"), "azure", 3, 5)
    assert ok and '"job_id": "j-abc"' in az
    assert "metadata/identity/oauth2/token" in az and "resource=https://storage.azure.com/" in az
    assert "https://acct.blob.core.windows.net/ckpt/runs/exits/3.json" in az
    assert "x-ms-blob-type: BlockBlob" in az
    s3, ok = record_lines(_env("s3://bkt/p"), "aws", 3, 5)
    assert ok and '"job_id": "j-abc"' in s3 and "s3://bkt/p/exits/3.json" in s3


def test_an_az_store_without_an_account_is_rejected_at_launch() -> None:
    with pytest.raises(LaunchRejected, match="storage account"):
        record_lines(_env("az://ckpt/runs"), "azure", 3, 5)
    az, _ = record_lines(
        {**_env("az://ckpt/runs"), "AZURE_STORAGE_ACCOUNT_NAME": "acct"}, "x", 1, 1
    )
    assert "https://acct.blob.core.windows.net/ckpt/runs/exits/3.json" in az
