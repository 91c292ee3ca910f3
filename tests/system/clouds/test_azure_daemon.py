"""The real daemon (config file -> Daemon -> its own AzureProvider) and CLI against the
loopback ARM and Retail fakes: place, evict and recover, a late allocation failure, leak
collection, cancel. Passes are driven on a simulated clock, so nothing sleeps."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from providers.base import TAG_ATTEMPT, TAG_OWNER
from tests.providers.azure.test_azure_cli_prices import _section

pytestmark = pytest.mark.timeout(90)


def write_config(tmp: Path, arm_url: str, prices_url: str, rg: str) -> Path:
    cfg = tmp / "spotwise.toml"
    cfg.write_text(
        f"""
[daemon]
state_dir = "{tmp}"
database_url = "sqlite:///{tmp}/spotwise.db"
checkpoint_root = "{(tmp / "ckpt").as_uri()}"
leak_grace = "2m"
unavailable_ttl = "15m"

# Only azure: a disabled aws section keeps the default local market out.
[providers.aws]
enabled = false
{_section(arm_url, prices_url, rg)}"""
    )
    return cfg


def cli(cfg: Path, *args: str) -> Any:
    from scheduler.cli.app import app

    result = CliRunner().invoke(app, [*args, "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    return result.output


def status(cfg: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in json.loads(cli(cfg, "status", "-o", "json"))["jobs"]}


def test_daemon_places_recovers_and_collects_on_azure(arm, prices, rg, tmp_path) -> None:
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    cfg = write_config(tmp_path, arm.url, prices.url, rg)
    job_file = tmp_path / "job.toml"
    job_file.write_text('name = "bert"\ncommand = ["python", "train.py"]\ngpus = "T4:1"\n')
    clock = SimClock(datetime.now(UTC))
    daemon = Daemon(cfg, clock=clock)
    job_id = json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"]
    # The disabled aws section is observe-only: built, never offered, never called idle.
    assert set(daemon.reconciler.providers) == {"aws", "azure"}
    assert daemon.reconciler.observe_only == {"aws"}

    def tick(seconds: float = 5) -> None:
        clock.advance(seconds)
        daemon._run_task("reconcile")
        daemon._run_task("accrue")

    daemon._run_task("poll_prices")
    tick()
    tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING", row
    assert (row["cloud"], row["instance_type"], row["market"]) == (
        "azure", "Standard_NC4as_T4_v3", "spot",
    )  # fmt: skip
    first, first_zone = row["instance_id"], row["zone"]
    vm = arm.vm(rg, first)
    assert vm is not None and vm["tags"]["spotwise-job"] == job_id

    # Azure evicts it; the next launch fails later for capacity; the third one runs.
    arm.evict(rg, first)
    arm.fail_later = ("ZonalAllocationFailed", "no capacity in this zone")
    for _ in range(6):
        tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING" and row["recoveries"] >= 1, row
    assert row["instance_id"] != first
    detail = json.loads(cli(cfg, "show", job_id, "-o", "json"))
    ends = [a["end_reason"] for a in detail["attempts"]]
    assert ends[0] == "interrupted" and "launch_failed" in ends and ends[-1] is None
    assert detail["attempts"][0]["zone"] == first_zone

    # A NIC of ours (this database's install id, this job) that belongs to no live attempt
    # is a leak: deleted after the grace. One with only the owner tag is left alone.
    ours = {TAG_OWNER: "spotwise", "spotwise-install": daemon.reconciler.install_id,
            "spotwise-job": job_id, TAG_ATTEMPT: f"{job_id}-a9"}  # fmt: skip
    arm.leak(rg, "networkInterfaces", "ghost-nic", ours, "eastus")
    arm.leak(rg, "networkInterfaces", "other-nic",
             {TAG_OWNER: "spotwise", TAG_ATTEMPT: "ghost-a1"}, "eastus")  # fmt: skip
    tick(31)  # the next leak sweep (every grace / 4 = 30 s here) sees it: its grace starts
    assert "ghost-nic" in arm.names("networkInterfaces")
    tick(150)
    assert "ghost-nic" not in arm.names("networkInterfaces")
    assert "other-nic" in arm.names("networkInterfaces")

    # Cancel: the VM is deleted and the job ends CANCELLED.
    second = status(cfg)[job_id]["instance_id"]
    cli(cfg, "cancel", job_id)
    for _ in range(3):
        tick()
    assert arm.vm(rg, second) is None
    assert status(cfg)[job_id]["state"] == "CANCELLED"
