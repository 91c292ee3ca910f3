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
