"""`spotwise doctor` on GCP, through the CLI: every permission of the shipped role asked
of projects.testIamPermissions (a denial names what is missing), the boot image family
resolved, the boot disk type checked against the configured machine series, the Billing
Catalog reached; exit 1 with the fixes when anything is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from providers.gcp.fake import FakeGcp
from providers.gcp.fake_catalog import PROJECT
from providers.gcp.preflight import role

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]


def _run(fake: FakeGcp, tmp_path: Path, extra: str = "", *args: str):
    from scheduler.cli.app import app

    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path}/state"\n\n[providers.gcp]\nproject = "{PROJECT}"\n'
        f'regions = ["us-central1"]\napi_endpoint = "{fake.url}"\n'
        f'billing_endpoint = "{fake.url}"\nresource_manager_endpoint = "{fake.url}"\n'
        f'credentials = "anonymous"\n{extra}'
    )
    return CliRunner().invoke(app, ["doctor", "-c", str(cfg), *args], env={"COLUMNS": "80"})


def test_doctor_passes_on_a_project_that_grants_the_role(fake: FakeGcp, tmp_path: Path) -> None:
    result = _run(fake, tmp_path)
    assert result.exit_code == 0, result.output
    assert "no problems" in result.stdout
    (call,) = fake.requests("POST", r":testIamPermissions$")
    assert call[3]["permissions"] == sorted(role()["includedPermissions"])
    assert fake.requests("GET", r"/global/images/family/common-cu128-ubuntu-2204-nvidia-570$")


def test_doctor_names_missing_permissions_and_a_missing_image(
    fake: FakeGcp, tmp_path: Path
) -> None:
    fake.granted = set(role()["includedPermissions"]) - {
        "compute.instances.create", "iam.serviceAccounts.actAs",
    }  # fmt: skip
    old_image = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
    result = _run(
        fake, tmp_path,
        f'image = "{old_image}"\ndisk_type = "pd-balanced"\nmachine_types = ["a3-*"]\n',
        "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 1
    problems = {
        c["check"]: c for c in json.loads(result.stdout)["checks"] if c["status"] == "problem"
    }
    perms = problems[f"permissions on project {PROJECT}"]
    assert (
        "compute.instances.create" in perms["detail"]
        and "iam.serviceAccounts.actAs" in perms["detail"]
    )
    assert "providers/gcp/iam-role.json" in perms["fix"]
    assert "common-cu124-debian-11" in problems["boot image"]["detail"]
    # a3-ultragpu boots only from Hyperdisk: the setting is named, not a pool.
    assert "a3-ultragpu" in problems["boot disk type"]["detail"]
    assert "[providers.gcp] disk_type" in problems["boot disk type"]["fix"]


def test_doctor_says_when_the_checkpoint_store_is_not_writable(
    fake: FakeGcp, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    from scheduler.cli.app import app

    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path}/state"\n'
        f'checkpoint_root = "{(blocker / "ckpt").as_uri()}"\n\n[providers.gcp]\n'
        f'project = "{PROJECT}"\nregions = ["us-central1"]\napi_endpoint = "{fake.url}"\n'
        f'billing_endpoint = "{fake.url}"\nresource_manager_endpoint = "{fake.url}"\n'
        'credentials = "anonymous"\n'
    )
    result = CliRunner().invoke(app, ["doctor", "-c", str(cfg), "-o", "json"])
    assert result.exit_code == 1
    (store,) = [c for c in json.loads(result.stdout)["checks"] if c["cloud"] == "store"]
    assert store["status"] == "problem" and "cannot write" in store["detail"]
