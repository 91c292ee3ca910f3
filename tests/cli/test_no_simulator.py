"""A production install is never the simulator, and the simulator always says `local`.

The local market's offerings carry real clouds' names (aws/us-east-1a/p3.2xlarge): beside a
real cloud they would compete with real offerings indistinguishably, so that takes an
explicit opt-in; `service install` writes a config without it; and every command that shows
the market's offerings, pools or instances labels them `local:`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

AWS = '[providers.aws]\nregions = ["us-east-1"]\n'


@pytest.mark.slow
def test_the_local_market_beside_a_real_cloud_needs_an_opt_in(tmp_path: Path):
    both = tmp_path / "both.toml"
    both.write_text(f"[providers.local]\nspeedup = 10\n\n{AWS}")
    r = spotwise("check-config", str(both))
    assert r.returncode == 2, r.stdout
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"error: {both}: providers.local (line 1): the local market is a")
    assert "beside_clouds = true" in line
    both.write_text(f"[providers.local]\nspeedup = 10\nbeside_clouds = true\n\n{AWS}")
    r = spotwise("check-config", str(both))
    assert r.returncode == 0 and "providers local, aws" in r.stdout, r.stderr


@pytest.mark.slow
def test_service_install_writes_a_config_without_the_local_market(tmp_path: Path):
    stage = tmp_path / "stage"
    r = spotwise("service", "install", "--root", str(stage))
    assert r.returncode == 0, r.stderr
    installed = stage / "etc" / "spotwise" / "spotwise.toml"
    text = installed.read_text()
    assert "[providers.local]" not in text and "\n[providers]\n" in text
    assert "# [providers.aws]" in text  # the clouds are still there to uncomment
    r = spotwise("check-config", str(installed))
    assert r.returncode == 0 and ": providers none;" in r.stdout, r.stdout + r.stderr
    assert r.stderr.strip() == (
        "warning: no provider configured: the daemon places nothing until one is"
    )
    # Uncommenting one cloud is enough: no simulator joins it.
    with_aws = text.replace("[providers]\n", f"[providers]\n{AWS}", 1)
    installed.write_text(with_aws)
    r = spotwise("check-config", str(installed), "-o", "json")
    assert json.loads(r.stdout)["providers"] == ["aws"], r.stderr


@pytest.mark.slow
def test_local_offerings_pools_and_instances_say_local(tmp_path: Path):
    world = make_ops_world(tmp_path)  # its attempts ran on the local market
    cfg = str(world.config)
    r = spotwise("prices", "--gpu", "V100", "-c", cfg)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()[1:]
    assert rows and all(row.split()[0] == "local" for row in rows)
    offered = json.loads(spotwise("prices", "--gpu", "V100", "-c", cfg, "-o", "json").stdout)
    assert {o["provider"] for o in offered["offerings"]} == {"local"}
    r = spotwise("status", "-o", "wide", "-c", cfg)
    running = next(x for x in r.stdout.splitlines() if world.ids["running"] in x)
    assert "local:aws/us-east-1a" in running
    r = spotwise("show", world.ids["failed"], "-c", cfg)
    assert "local:aws/us-east-1a/p3.2xlarge/spot" in r.stdout
