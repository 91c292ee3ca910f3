"""`spotwise doctor` as an operator runs it: the real command (`python -m scheduler`) in its
own process, on an 80-column terminal, against the GCP and Azure fakes of one config, with
one cloud refusing a permission: one line per check, the problem line names the fix, exit 1;
and with nothing wrong, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from providers.gcp.fake_catalog import PROJECT
from tests.support.azure_harness import SUB

pytestmark = pytest.mark.timeout(120)


def _config(tmp_path: Path, fake, arm, prices, rg: str) -> Path:
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path}/state"\n\n'
        f'[providers.gcp]\nproject = "{PROJECT}"\nregions = ["us-central1"]\n'
        f'api_endpoint = "{fake.url}"\nbilling_endpoint = "{fake.url}"\n'
        f'resource_manager_endpoint = "{fake.url}"\ncredentials = "anonymous"\n\n'
        f'[providers.azure]\nsubscription_id = "{SUB}"\nresource_group = "{rg}"\n'
        f'locations = ["eastus"]\nbase_url = "{arm.url}"\nprices_url = "{prices.url}"\n'
        f'credentials = "anonymous"\nsubnet_id = "/subscriptions/{SUB}/resourceGroups/{rg}/'
        'providers/Microsoft.Network/virtualNetworks/v/subnets/s"\n'
    )
    return cfg


def _doctor(cfg: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": os.getcwd()}
    return subprocess.run(
        [sys.executable, "-m", "scheduler", "doctor", "-c", str(cfg)],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def test_doctor_in_its_own_process(tmp_path: Path, fake, arm, prices, rg: str) -> None:
    cfg = _config(tmp_path, fake, arm, prices, rg)
    fine = _doctor(cfg)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "no problems: ready for the first job" in fine.stdout
    assert {"gcp", "azure", "store"} <= {line.split()[1] for line in fine.stdout.splitlines()
                                         if line.startswith(("ok", "skipped"))}  # fmt: skip

    arm.not_actions = ["Microsoft.Compute/virtualMachines/delete"]
    refused = _doctor(cfg)
    assert refused.returncode == 1
    out = refused.stdout
    assert all(len(line) <= 80 for line in out.splitlines())
    joined = " ".join(out.split())  # the 80-column wrap joined back
    assert f"PROBLEM azure permissions on resource group {rg}: missing " in joined
    assert "Microsoft.Compute/virtualMachines/delete" in joined
    assert "-- fix: assign the role in providers/azure/role-definition.json" in joined
    assert "1 problem(s); fix them before the first job" in joined
    assert "Traceback" not in refused.stderr
