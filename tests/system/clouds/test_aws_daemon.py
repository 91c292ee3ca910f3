"""The real daemon (config file -> Daemon -> its own AwsProvider) and CLI against moto.

Prices and a capacity error are injected on moto's side (its response handlers, in this
process), so the daemon's wiring is untouched: nothing here hands it a test session. The
passes are driven on a simulated clock instead of APScheduler timers, so nothing sleeps.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from providers.base import Market
from tests.support.aws_fixtures import ec2_client, moto_instance, spot_price

pytestmark = pytest.mark.timeout(60)

A10G_TYPES = ["g5.xlarge", "g5.2xlarge", "g6.xlarge"]


@pytest.fixture
def moto_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.ec2.responses.spot_instances import SpotInstances

    original = SpotInstances.describe_spot_price_history

    def priced(self: Any) -> Any:
        res = original(self)
        for row in res.result["SpotPriceHistory"]:
            row["SpotPrice"] = f"{spot_price(row['InstanceType'], row['AvailabilityZone']):.5f}"
        return res

    monkeypatch.setattr(SpotInstances, "describe_spot_price_history", priced)


@pytest.fixture
def no_capacity_in(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Zones where moto answers RunInstances with InsufficientInstanceCapacity."""
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses.instances import InstanceResponse

    zones: set[str] = set()
    original = InstanceResponse.run_instances

    def run(self: Any) -> Any:
        zone = self._get_param("Placement.AvailabilityZone")
        if zone in zones:
            raise EC2ClientError(
                "InsufficientInstanceCapacity",
                f"We currently do not have sufficient capacity in the Availability Zone {zone}.",
            )
        return original(self)

    monkeypatch.setattr(InstanceResponse, "run_instances", run)
    return zones


def write_config(tmp: Path, moto: str, pricing_url: str) -> Path:
    cfg = tmp / "spotwise.toml"
    cfg.write_text(
        f"""
[daemon]
state_dir = "{tmp}"
database_url = "sqlite:///{tmp}/spotwise.db"
checkpoint_root = "{(tmp / "ckpt").as_uri()}"
leak_grace = "2m"
unavailable_ttl = "15m"

[providers.aws]
regions = ["us-east-1"]
endpoint_url = "{moto}"
pricing_endpoint_url = "{pricing_url}"
ami = "ami-0123456789abcdef0"
instance_types = {json.dumps(A10G_TYPES)}
max_attempts = 2
"""
    )
    return cfg


def cli(cfg: Path, *args: str) -> Any:
    from scheduler.cli.app import app

    result = CliRunner().invoke(app, [*args, "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    return result.output


def status(cfg: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in json.loads(cli(cfg, "status", "-o", "json"))["jobs"]}


def test_daemon_places_recovers_moves_on_cancels_and_collects_leaks(
    moto, pricing, moto_prices, no_capacity_in, tmp_path
):
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    cfg = write_config(tmp_path, moto, pricing.url)
    job_file = tmp_path / "job.toml"
    job_file.write_text('name = "bert"\ncommand = ["python", "train.py"]\ngpus = "A10G:1"\n')
    clock = SimClock(datetime.now(UTC))
    daemon = Daemon(cfg, clock=clock)  # creates the database; the CLI never does
    job_id = json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"]
    rec = daemon.reconciler
    assert type(rec.providers["aws"]).__name__ == "AwsProvider"

    def tick(seconds: float = 5) -> None:
        clock.advance(seconds)
        daemon._run_task("reconcile")
        daemon._run_task("accrue")

    daemon._run_task("poll_prices")
    a10g_spot = sorted(
        (o for o in rec.catalogs.catalog if o.gpu_model == "A10G" and o.market is Market.SPOT),
        key=lambda o: o.price_per_hour,
    )
    assert a10g_spot[0].instance_type == "g5.xlarge" and a10g_spot[0].zone == "us-east-1a"
    tick()
    assert status(cfg)[job_id]["state"] == "LAUNCHING"  # EC2 answers "pending"
    tick()

    # Placed on the cheapest adequate offering, visible in `status -o json`.
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING"
    assert (row["cloud"], row["zone"], row["instance_type"], row["market"]) == (
        "aws",
        "us-east-1a",
        "g5.xlarge",
        "spot",
    )
    first = row["instance_id"]
    assert first.startswith("i-")
    raw = ec2_client(moto).describe_instances(InstanceIds=[first])["Reservations"][0]
    tags = {t["Key"]: t["Value"] for t in raw["Instances"][0]["Tags"]}
    assert tags["spotwise-job"] == job_id and tags["spotwise-owner"] == "spotwise"

    # The next-best pool (us-east-1b) has no capacity; EC2 reclaims the first instance.
    no_capacity_in.add("us-east-1b")
    from moto.ec2.models.instances import StateReason

    inst = moto_instance(first)
    inst.terminate()
    inst.state_reason = StateReason(
        "Server.SpotInstanceTermination", "Server.SpotInstanceTermination"
    )
    tick()
    tick()

    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING" and row["recoveries"] == 1
    assert row["zone"] == "us-east-1c" and row["instance_id"] != first
    detail = json.loads(cli(cfg, "show", job_id, "-o", "json"))
    ends = [(a["zone"], a["end_reason"]) for a in detail["attempts"]]
    assert ends == [
        ("us-east-1a", "interrupted"),
        ("us-east-1b", "launch_failed"),
        ("us-east-1c", None),
    ]
    kinds = [e["kind"] for e in detail["events"]]
    assert "attempt_interrupted" in kinds and "attempt_launch_failed" in kinds
    events = json.loads(cli(cfg, "events", "-o", "json"))["events"]
    unavailable = [e["message"] for e in events if e["kind"] == "pool_unavailable"]
    assert any(
        "aws/us-east-1b/g5.xlarge/spot" in m and "InsufficientInstanceCapacity" in m
        for m in unavailable
    )

    # An instance of ours (this database's install id, this job) that belongs to no live
    # attempt is a leak: terminated after the grace. One with only the owner tag is not
    # provably ours: reported, never terminated.
    mine = {k: tags[k] for k in ("spotwise-owner", "spotwise-install", "spotwise-job")}
    ours = _run_tagged(moto, {**mine, "spotwise-attempt": f"{job_id}-a9"})
    bare = _run_tagged(moto, {"spotwise-owner": "spotwise", "spotwise-attempt": "ghost-a1"})
    tick(31)  # the next leak sweep (every grace / 4 = 30 s here) sees it: its grace starts
    assert _state(moto, ours) == "running"  # within the grace period
    tick(150)
    assert _state(moto, ours) == "terminated"
    assert _state(moto, bare) == "running"
    assert _state(moto, status(cfg)[job_id]["instance_id"]) == "running"
    events = json.loads(cli(cfg, "events", "-o", "json"))["events"]
    assert [e["kind"] for e in events].count("leak_not_ours") == 1

    # Cancel through the CLI: the instance is terminated and the job ends CANCELLED.
    second = status(cfg)[job_id]["instance_id"]
    cli(cfg, "cancel", job_id)
    tick()
    tick()
    tick()
    assert _state(moto, second) == "terminated"
    row = status(cfg)[job_id]
    assert row["state"] == "CANCELLED" and row["instance_id"] is None
    assert row["cost_usd"] >= 0


def _run_tagged(moto: str, tags: dict[str, str]) -> str:
    return ec2_client(moto).run_instances(
        ImageId="ami-0123456789abcdef0",
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["Instances"][0]["InstanceId"]


def test_two_deployments_in_one_account_never_collect_each_others_instances(
    moto, pricing, moto_prices, tmp_path
):
    """Staging and production: two daemons, two databases, one EC2 account (moto), the
    same default owner. Neither terminates the other's instances, however long they run."""
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    clock = SimClock(datetime.now(UTC))
    daemons, jobs = [], []
    for name in ("staging", "production"):
        home = tmp_path / name
        home.mkdir()
        cfg = write_config(home, moto, pricing.url)
        job_file = home / "job.toml"
        job_file.write_text(f'name = "{name}"\ncommand = ["python", "t.py"]\ngpus = "A10G:1"\n')
        daemon = Daemon(cfg, clock=clock)
        daemon._run_task("poll_prices")
        jobs.append(json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"])
        daemons.append((daemon, cfg))
    for _ in range(12):  # 6 minutes: three leak graces, a sweep every 30 s
        clock.advance(30)
        for daemon, _ in daemons:
            daemon._run_task("reconcile")
            daemon._run_task("accrue")
    reservations = ec2_client(moto).describe_instances()["Reservations"]
    states = [i["State"]["Name"] for r in reservations for i in r["Instances"]]
    assert states == ["running", "running"]  # moto counts: both, untouched
    for (_, cfg), job_id in zip(daemons, jobs, strict=True):
        assert status(cfg)[job_id]["state"] == "RUNNING"
        kinds = [e["kind"] for e in json.loads(cli(cfg, "events", "-o", "json"))["events"]]
        assert "leak_terminated" not in kinds and kinds.count("leak_not_ours") == 1


def _state(moto: str, iid: str) -> str:
    res = ec2_client(moto).describe_instances(InstanceIds=[iid])["Reservations"]
    return res[0]["Instances"][0]["State"]["Name"]
