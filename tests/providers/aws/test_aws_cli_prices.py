"""`spotwise prices --cloud aws -o json` lists live AWS offerings from the adapter (moto)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.support.aws_fixtures import ON_DEMAND, SECRET, spot_price
from tests.system.clouds.test_aws_daemon import moto_prices, write_config

pytestmark = pytest.mark.timeout(60)
__all__ = ["moto_prices"]  # the fixture, imported for use here


@pytest.mark.slow
def test_prices_cli_lists_live_aws_offerings(moto, pricing, moto_prices, tmp_path):
    from scheduler.cli.app import app

    cfg = write_config(tmp_path, moto, pricing.url)
    result = CliRunner().invoke(app, ["prices", "--cloud", "aws", "-o", "json", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    doc = json.loads(result.stdout)
    rows = doc["offerings"]
    assert rows and all(r["cloud"] == "aws" for r in rows)
    prices = [r["price_per_hour"] for r in rows]
    assert prices == sorted(prices)  # cheapest first
    spot = {
        (r["instance_type"], r["zone"]): r["price_per_hour"] for r in rows if r["market"] == "spot"
    }
    assert spot[("g5.xlarge", "us-east-1a")] == pytest.approx(spot_price("g5.xlarge", "us-east-1a"))
    od = {r["instance_type"]: r["price_per_hour"] for r in rows if r["market"] == "on-demand"}
    assert od["g5.xlarge"] == pytest.approx(ON_DEMAND["g5.xlarge"])
    assert {r["gpu_model"] for r in rows} == {"A10G", "L4"}

    only = CliRunner().invoke(
        app, ["prices", "--cloud", "aws", "--gpu", "L4", "-o", "json", "-c", str(cfg)]
    )
    assert {r["gpu_model"] for r in json.loads(only.stdout)["offerings"]} == {"L4"}


@pytest.mark.slow
def test_prices_wide_shows_each_spot_pools_hazard_and_where_it_came_from(
    moto, pricing, moto_prices, placement_scores, tmp_path
):
    from scheduler.cli.app import app
    from tests.support.aws_fixtures import ec2_client

    zones = {z["ZoneName"]: z["ZoneId"] for z in ec2_client(moto).describe_availability_zones()[
        "AvailabilityZones"
    ]}  # fmt: skip
    placement_scores["scores"] = {zones["us-east-1a"]: 9}
    cfg = write_config(tmp_path, moto, pricing.url)
    result = CliRunner().invoke(app, ["prices", "--cloud", "aws", "-o", "wide", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "HAZARD/H" in lines[0] and "FROM" in lines[0]
    scored = [ln for ln in lines if "us-east-1a" in ln and " spot " in ln]
    assert scored and all("aws score 9" in ln and "0.029" in ln for ln in scored)
    other = [ln for ln in lines if "us-east-1b" in ln and " spot " in ln]
    assert other and all("config prior" in ln for ln in other)
    assert all("on-demand" in ln.split()[-1] for ln in lines[1:] if " on-demand " in ln)
    doc = json.loads(
        CliRunner().invoke(app, ["prices", "--cloud", "aws", "-o", "json", "-c", str(cfg)]).stdout
    )
    row = next(r for r in doc["offerings"] if r["zone"] == "us-east-1a" and r["market"] == "spot")
    assert row["hazard_from"] == "aws score 9" and row["hazard_per_hour"] == pytest.approx(
        0.0286, abs=1e-3
    )
    plain = CliRunner().invoke(app, ["prices", "--cloud", "aws", "-c", str(cfg)])
    assert "HAZARD" not in plain.stdout  # the table keeps its columns
