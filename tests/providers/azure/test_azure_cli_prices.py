"""`spotwise prices --cloud azure -o json` lists live Azure offerings through the real CLI,
with a config pointing at the loopback fakes; the config section is validated."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from providers.azure.fake_catalog import figures
from scheduler.core.clock import RealClock
from scheduler.core.config import parse_config
from scheduler.core.errors import UserError
from scheduler.daemon.wiring import build_providers, clock_for
from tests.support.azure_harness import SUB

pytestmark = pytest.mark.timeout(60)


def _section(arm_url: str, prices_url: str, rg: str) -> str:
    subnet = (
        f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Network/vnets/v/subnets/s"
    )
    return f"""
[providers.azure]
subscription_id = "{SUB}"
resource_group = "{rg}"
locations = ["eastus", "westus2"]
base_url = "{arm_url}"
prices_url = "{prices_url}"
credentials = "anonymous"
subnet_id = "{subnet}"
vm_sizes = ["Standard_NC*"]
max_retries = 0
polling_interval = "0s"
"""


def write_config(tmp: Path, arm_url: str, prices_url: str, rg: str) -> Path:
    cfg = tmp / "spotwise.toml"
    cfg.write_text(
        f"""
[daemon]
state_dir = "{tmp}"
database_url = "sqlite:///{tmp}/spotwise.db"
{_section(arm_url, prices_url, rg)}"""
    )
    return cfg


@pytest.mark.slow
def test_prices_cli_lists_live_azure_offerings(arm, prices, rg, tmp_path) -> None:
    from scheduler.cli.app import app

    cfg = write_config(tmp_path, arm.url, prices.url, rg)
    result = CliRunner().invoke(app, ["prices", "--cloud", "azure", "-o", "json", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    # Config.with_default_provider() adds the local market (which simulates azure too) when
    # only azure is configured; its rows are not the adapter's.
    rows = [r for r in json.loads(result.stdout)["offerings"] if r["provider"] == "azure"]
    assert rows and {r["cloud"] for r in rows} == {"azure"}
    got = [r["price_per_hour"] for r in rows]
    assert got == sorted(got)
    spot = {
        (r["instance_type"], r["zone"]): r["price_per_hour"] for r in rows if r["market"] == "spot"
    }
    assert spot[("Standard_NC4as_T4_v3", "westus2-1")] == pytest.approx(
        figures()[("Standard_NC4as_T4_v3", "westus2")][4]
    )
    assert {r["gpu_model"] for r in rows} == {"T4", "A100", "V100", "H100"}
    assert not [r for r in rows if r["instance_type"].startswith("Standard_ND")]
    only = CliRunner().invoke(
        app, ["prices", "--cloud", "azure", "--gpu", "A100", "-o", "json", "-c", str(cfg)]
    )
    only_rows = json.loads(only.stdout)["offerings"]
    assert {r["gpu_model"] for r in only_rows if r["provider"] == "azure"} == {"A100"}


def test_config_builds_the_provider_and_real_time(arm, prices, rg) -> None:
    cfg = parse_config(_section(arm.url, prices.url, rg))
    assert cfg.providers.azure is not None and cfg.providers.azure.resource_group == rg
    provs = build_providers(cfg)
    assert provs["azure"].name == "azure"
    assert isinstance(clock_for(cfg), RealClock)
    off = parse_config(_section(arm.url, prices.url, rg) + "enabled = false\n")
    assert "azure" not in build_providers(off)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('subscription_id = "not-a-guid"', "subscription"),
        ('locations = ["East US"]', "location"),
        ('credentials = "password"', "credentials"),
        ("surprise = 1", "surprise"),
    ],
)
def test_bad_azure_settings_are_one_clear_error(line: str, needle: str) -> None:
    base = {
        "subscription_id": f'"{SUB}"',
        "resource_group": '"rg"',
        "locations": '["eastus"]',
    }
    key = line.split("=")[0].strip()
    base[key] = line.split("=", 1)[1].strip()
    text = "[providers.azure]\n" + "\n".join(f"{k} = {v}" for k, v in base.items()) + "\n"
    with pytest.raises(UserError) as info:
        parse_config(text)
    assert needle in str(info.value)


def test_per_location_subnets_must_cover_every_location() -> None:
    text = f"""
[providers.azure]
subscription_id = "{SUB}"
resource_group = "rg"
locations = ["eastus", "westus2"]
subnet_id = {{ eastus = "/subscriptions/x/subnets/a" }}
"""
    with pytest.raises(UserError) as info:
        parse_config(text)
    assert "westus2" in str(info.value)


@pytest.mark.slow
def test_prices_wide_names_the_eviction_band_of_each_spot_pool(arm, prices, rg, tmp_path):
    from scheduler.cli.app import app

    size = "Standard_NC4as_T4_v3"
    arm.graph.bands[("eastus", size.lower())] = "5-10"
    arm.spot_scores[("eastus", size, "1")] = "High"  # the band wins over the score
    arm.spot_scores[("westus2", size, "1")] = "Low"  # no band there: the score speaks
    try:
        cfg = write_config(tmp_path, arm.url, prices.url, rg)
        result = CliRunner().invoke(
            app, ["prices", "--cloud", "azure", "-o", "wide", "--limit", "200", "-c", str(cfg)]
        )
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert "HAZARD/H" in lines[0] and "FROM" in lines[0]
        rows = [ln.split() for ln in lines if ln.startswith("azure") and f" {size} " in ln]
        east = [c for c in rows if c[1].startswith("eastus-") and "spot" in c]
        assert east and all(c[-3:] == ["azure", "eviction", "5-10%"] for c in east)
        assert all(c[-4] == f"{-math.log(0.925):.3f}" for c in east)
        west = {c[1]: c for c in rows if c[1].startswith("westus2-") and "spot" in c}
        assert west["westus2-1"][-3:] == ["azure", "score", "Low"]
        assert arm.graph.calls and len(arm.graph.calls) == 1
    finally:
        arm.spot_scores.clear()
