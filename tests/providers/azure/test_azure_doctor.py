"""`spotwise doctor` on Azure, through the CLI: the shipped role's actions against the
caller's permissions on the resource group (a NotActions entry is a denial), the image in
each location, a subnet per location, the Retail Prices API; exit 1 with the fixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from providers.azure.fake_arm import FakeArm
from providers.azure.fake_prices import FakePrices
from tests.support.azure_harness import SUB

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]


def _run(arm: FakeArm, prices: FakePrices, rg: str, tmp_path: Path, extra: str = "", *args: str):
    from scheduler.cli.app import app

    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(
        f'[daemon]\nstate_dir = "{tmp_path}/state"\n\n[providers.azure]\n'
        f'subscription_id = "{SUB}"\nresource_group = "{rg}"\nlocations = ["eastus"]\n'
        f'base_url = "{arm.url}"\nprices_url = "{prices.url}"\ncredentials = "anonymous"\n'
        f'subnet_id = "/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Network/'
        f'virtualNetworks/v/subnets/s"\n{extra}'
    )
    return CliRunner().invoke(app, ["doctor", "-c", str(cfg), *args], env={"COLUMNS": "80"})


def test_doctor_passes_with_the_role(arm, prices, rg, tmp_path: Path) -> None:
    result = _run(arm, prices, rg, tmp_path)
    assert result.exit_code == 0, result.output
    assert "ok      azure  permissions on resource group" in result.stdout
    assert any("/providers/Microsoft.Authorization/permissions" in p for _, p, _ in arm.requests)


def test_doctor_names_denied_actions_and_a_missing_image(arm, prices, rg, tmp_path) -> None:
    arm.actions = ["Microsoft.Compute/*", "Microsoft.Network/*/read"]
    arm.not_actions = ["Microsoft.Compute/virtualMachines/delete"]
    result = _run(arm, prices, rg, tmp_path, 'image = "canonical:nope:none:latest"\n', "-o", "json")
    assert result.exit_code == 1
    problems = {
        c["check"]: c for c in json.loads(result.stdout)["checks"] if c["status"] == "problem"
    }
    perms = problems[f"permissions on resource group {rg}"]
    for action in ("Microsoft.Compute/virtualMachines/delete",
                   "Microsoft.Network/networkInterfaces/write",
                   "Microsoft.Network/virtualNetworks/subnets/join/action"):  # fmt: skip
        assert action in perms["detail"]
    assert "Microsoft.Compute/virtualMachines/write" not in perms["detail"]
    assert "providers/azure/role-definition.json" in perms["fix"]
    assert "canonical:nope:none:latest" in problems["image in eastus"]["detail"]
