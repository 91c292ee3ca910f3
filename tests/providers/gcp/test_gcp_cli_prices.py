"""`spotwise prices --cloud gcp -o json` lists live GCP offerings from the adapter (fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from providers.gcp.fake import PROJECT, FakeGcp

pytestmark = pytest.mark.timeout(60)


def write_config(tmp: Path, fake: FakeGcp, extra: str = "") -> Path:
    cfg = tmp / "spotwise.toml"
    cfg.write_text(
        f"""
[daemon]
state_dir = "{tmp}"
database_url = "sqlite:///{tmp}/spotwise.db"
checkpoint_root = "{(tmp / "ckpt").as_uri()}"
leak_grace = "2m"
unavailable_ttl = "15m"

[providers.gcp]
project = "{PROJECT}"
regions = ["us-central1"]
api_endpoint = "{fake.url}"
billing_endpoint = "{fake.url}"
credentials = "anonymous"
machine_types = ["n1-standard-4", "n1-standard-8", "g2-*"]
{extra}
"""
    )
    return cfg


@pytest.mark.slow
def test_prices_cli_lists_live_gcp_offerings(fake: FakeGcp, tmp_path: Path) -> None:
    from scheduler.cli.app import app

    cfg = write_config(tmp_path, fake)
    result = CliRunner().invoke(app, ["prices", "--cloud", "gcp", "-o", "json", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = doc["offerings"]
    assert rows and all(r["cloud"] == "gcp" for r in rows)
    prices = [r["price_per_hour"] for r in rows]
    assert prices == sorted(prices)
    spot = {
        (r["instance_type"], r["zone"]): r["price_per_hour"] for r in rows if r["market"] == "spot"
    }
    disk = 200 * 0.10 / 730  # the boot disk (providers/gcp/fixtures/skus.json)
    assert spot[("n1-standard-4+1xnvidia-tesla-t4", "us-central1-a")] == pytest.approx(
        0.1654 + 4 * 0.0116 + 15 * 0.00156 + disk, abs=1e-4
    )
    assert spot[("g2-standard-4", "us-central1-b")] == pytest.approx(
        0.2343 + 4 * 0.0105 + 16 * 0.00123 + disk, abs=1e-4
    )
    assert {r["gpu_model"] for r in rows} == {"T4", "V100", "L4"}
    assert fake.requests("GET", r"/skus$")  # live, from the adapter, not a snapshot
    only = CliRunner().invoke(
        app, ["prices", "--cloud", "gcp", "--gpu", "L4", "-o", "json", "-c", str(cfg)]
    )
    assert {r["gpu_model"] for r in json.loads(only.stdout)["offerings"]} == {"L4"}


@pytest.mark.slow
def test_prices_wide_names_the_history_where_it_is_the_pools_prior(
    fake: FakeGcp, tmp_path: Path
) -> None:
    from scheduler.cli.app import app

    fake.history[("us-central1-a", "g2-standard-4")] = [0.5, 0.5]
    fake.advice[("us-central1-a", "g2-standard-4")] = (0.8, "36000s")  # the uptime wins there
    fake.history[("us-central1-b", "g2-standard-4")] = [0.1, 0.3]
    cfg = write_config(tmp_path, fake)
    result = CliRunner().invoke(app, ["prices", "--cloud", "gcp", "-o", "wide", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "HAZARD/H" in lines[0] and "FROM" in lines[0]
    g2 = [ln.split() for ln in lines if ln.startswith("gcp") and " g2-standard-4 " in ln]
    by_zone = {cells[1]: cells for cells in g2 if "spot" in cells}
    assert by_zone["us-central1-b"][-3:] == ["gcp", "preempted", "20%"]
    assert by_zone["us-central1-b"][-4] == f"{0.25 / 24:.3f}"
    assert by_zone["us-central1-a"][-3:] == ["gcp", "uptime", "10h"]
    doc = json.loads(
        CliRunner().invoke(app, ["prices", "--cloud", "gcp", "-o", "json", "-c", str(cfg)]).stdout
    )
    row = next(
        r for r in doc["offerings"]
        if r["zone"] == "us-central1-b" and r["instance_type"] == "g2-standard-4"
        and r["market"] == "spot"
    )  # fmt: skip
    assert row["hazard_from"] == "gcp preempted 20%"
    assert row["hazard_per_hour"] == pytest.approx(0.25 / 24)
