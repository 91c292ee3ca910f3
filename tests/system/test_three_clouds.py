"""Three clouds, one daemon: AWS (moto), GCP and Azure (loopback fakes) configured together.

The real daemon runs as a subprocess on a config naming all three; the fakes run in this
process (moto's ThreadedMotoServer, the GCE/Billing fake, the ARM and Retail Prices fakes),
so their prices can move and their clouds can reclaim instances the way each cloud does.
The fakes' instances run no code: this test plays the instance's part, running the job's
command under `trainer.outcome` (what the boot script does) with exactly the environment the
boot script exports, so the job reaches the S3 store (moto's S3) only through what the daemon
passed it. One job goes AWS -> GCP -> Azure -> AWS, each move forced by an interruption
after the prices moved, resumes from `latest` each time and succeeds with cost = the sum of
its attempts. A second test feeds one job file to the local market's and the three adapters'
catalogs and finds the same canonical GPU names in each.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from providers.aws.fake_pricing import FakePricing
from providers.azure.fake_arm import FakeArm
from providers.azure.fake_catalog import price_rows, skus
from providers.azure.fake_prices import FakePrices
from providers.gcp.fake import PROJECT, FakeGcp
from tests.support.aws_harness import moto_server_url
from tests.support.azure_harness import SUB

ROOT = Path(__file__).resolve().parents[2]
STORE_COUNTER = Path(__file__).parents[1] / "support" / "jobs" / "store_counter.py"
BUCKET = "spotwise-ckpt"
REGION = "us-east-1"
AWS_T4 = "g4dn.xlarge"
GCP_T4 = "n1-standard-4+1xnvidia-tesla-t4"
GCP_T4_SKU = "Spot Preemptible Nvidia Tesla T4 GPU running in Americas"
# n1-standard-4's spot cores and RAM, and its 200 GiB pd-balanced boot disk at $0.100 per
# GiB-month (providers/gcp/fixtures/skus.json)
GCP_T4_REST = 4 * 0.0116 + 15 * 0.00156 + 200 * 0.10 / 730
AZ_T4 = "Standard_NC4as_T4_v3"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIATHREECLOUDS00001",
    "AWS_SECRET_ACCESS_KEY": "three-clouds-test-secret",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
ON_DEMAND = {AWS_T4: 0.526, "p4d.24xlarge": 21.957642}


class Clouds:
    """The three fakes and the knobs that move their spot prices."""

    def __init__(self) -> None:
        self.moto = moto_server_url()
        req = urllib.request.Request(f"{self.moto}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        self.s3 = boto3.client("s3", region_name=REGION, endpoint_url=self.moto)
        self.s3.create_bucket(Bucket=BUCKET)
        self.pricing = FakePricing().start()
        for itype, usd in ON_DEMAND.items():
            self.pricing.prices[(REGION, itype)] = usd
        self.gcp = FakeGcp()
        self.arm = FakeArm(skus(), SUB)
        self.retail = FakePrices(price_rows(), page_size=10)
        self.rg = "rg-three-clouds"
        self.aws_spot: dict[str, float] = {}  # zone -> g4dn.xlarge spot price

    def close(self) -> None:
        self.pricing.stop()
        self.gcp.close()
        self.arm.close()
        self.retail.close()

    def set_aws(self, by_zone: dict[str, float]) -> None:
        self.aws_spot = dict(by_zone)

    def set_gcp(self, total: float) -> None:
        """The n1-standard-4 + 1x T4 spot price becomes `total` (the GPU SKU moves)."""
        gpu = round(total - GCP_T4_REST, 9)
        with self.gcp.lock:
            (sku,) = [s for s in self.gcp.skus if s["description"] == GCP_T4_SKU]
            rate = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]
            units = int(gpu)
            rate["unitPrice"] = {
                "currencyCode": "USD", "units": str(units), "nanos": round((gpu - units) * 1e9),
            }  # fmt: skip

    def set_azure(self, price: float) -> None:
        """The current Linux spot meter of NC4as_T4_v3 in eastus (not the decoys)."""
        rows = [
            r for r in self.retail.items
            if r["armSkuName"] == AZ_T4 and r["armRegionName"] == "eastus"
            and r["meterName"].endswith(" Spot") and r["productName"].endswith("Series")
            and r["type"] == "Consumption" and r["effectiveStartDate"].startswith("2026")
        ]  # fmt: skip
        assert len(rows) == 1
        rows[0]["retailPrice"] = rows[0]["unitPrice"] = price

    def sku_polls(self) -> int:
        """GCP price polls begun (first SKU pages): each poll_prices pass makes one."""
        return len([r for r in self.gcp.requests("GET", r"/skus$") if not r[2].get("pageToken")])

    # -- the instance's side ----------------------------------------------------------------
    def boot_script(self, cloud: str, instance_id: str) -> str:
        if cloud == "aws":
            ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=self.moto)
            attr = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
            return base64.b64decode(attr["UserData"]["Value"]).decode()
        if cloud == "gcp":
            with self.gcp.lock:
                (vm,) = [v for (_, n), v in self.gcp.instances.items() if n == instance_id]
            (item,) = [i for i in vm["metadata"]["items"] if i["key"] == "startup-script"]
            return str(item["value"])
        vm = self.arm.vm(self.rg, instance_id)
        assert vm is not None
        return base64.b64decode(vm["properties"]["osProfile"]["customData"]).decode()

    def interrupt(self, cloud: str, instance_id: str) -> None:
        """Each cloud reclaims its spot capacity its own way."""
        if cloud == "aws":
            from moto.ec2.models.instances import StateReason

            inst = _moto_instance(instance_id)
            inst.terminate()
            inst.state_reason = StateReason(
                "Server.SpotInstanceTermination", "Server.SpotInstanceTermination"
            )
        elif cloud == "gcp":
            self.gcp.preempt(instance_id, action="STOP")  # compute.instances.preempted, TERMINATED
        else:
            self.arm.evict(self.rg, instance_id)  # Delete eviction policy: the VM is gone

    def power_off(self, cloud: str, instance_id: str) -> None:
        """The boot script's `shutdown -h now` after the job ended."""
        if cloud == "aws":
            from moto.ec2.models.instances import StateReason

            inst = _moto_instance(instance_id)
            inst.terminate()  # InstanceInitiatedShutdownBehavior=terminate
            inst.state_reason = StateReason(
                "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
                "Client.InstanceInitiatedShutdown",
            )
        elif cloud == "gcp":
            self.gcp.guest_shutdown(instance_id)
        else:
            self.arm.power_off(self.rg, instance_id)

    def read(self, uri: str, name: str) -> str | None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        try:
            obj = self.s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")
        except self.s3.exceptions.NoSuchKey:
            return None
        return obj["Body"].read().decode()


def _moto_instance(instance_id: str) -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return ec2_backends[DEFAULT_ACCOUNT_ID][REGION].get_instance(instance_id)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                "SPOTWISE_S3_ENDPOINT_URL"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def clouds(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clouds]:
    from moto.ec2.responses.spot_instances import SpotInstances

    from tests.support.aws_fixtures import spot_price

    c = Clouds()
    original = SpotInstances.describe_spot_price_history

    def priced(self: Any) -> Any:  # moto prices every offer at 0.00001: ours instead
        res = original(self)
        for row in res.result["SpotPriceHistory"]:
            itype, zone = row["InstanceType"], row["AvailabilityZone"]
            price = c.aws_spot.get(zone, 0.5) if itype == AWS_T4 else spot_price(itype, zone)
            row["SpotPrice"] = f"{price:.5f}"
        return res

    monkeypatch.setattr(SpotInstances, "describe_spot_price_history", priced)
    yield c
    c.close()


def config_text(home: Path, c: Clouds) -> str:
    subnet = f"/subscriptions/{SUB}/resourceGroups/{c.rg}/providers/Microsoft.Network/" \
             "virtualNetworks/vnet/subnets/default"  # fmt: skip
    return f"""
[daemon]
state_dir = "{home}"
database_url = "sqlite:///{home}/spotwise.db"
checkpoint_root = "s3://{BUCKET}/jobs"
reconcile_interval = "0.3s"
price_interval = "1s"
accrue_interval = "0.5s"
leak_grace = "1h"
call_timeout = "20s"

[providers.aws]
regions = ["{REGION}"]
endpoint_url = "{c.moto}"
pricing_endpoint_url = "{c.pricing.url}"
ami = "ami-0123456789abcdef0"
instance_types = ["{AWS_T4}"]
price_refresh = "0s"
max_attempts = 2
connect_timeout = "2s"
read_timeout = "10s"

[providers.gcp]
project = "{PROJECT}"
regions = ["us-central1"]
api_endpoint = "{c.gcp.url}"
billing_endpoint = "{c.gcp.url}"
credentials = "anonymous"
machine_types = ["n1-standard-4"]
price_refresh = "0s"
timeout = "10s"

[providers.azure]
subscription_id = "{SUB}"
resource_group = "{c.rg}"
locations = ["eastus"]
base_url = "{c.arm.url}"
prices_url = "{c.retail.url}"
credentials = "anonymous"
subnet_id = "{subnet}"
vm_sizes = ["{AZ_T4}"]
max_retries = 0
polling_interval = "0s"
price_refresh = "0s"
"""


def cli(cfg: Path, *args: str) -> Any:
    from scheduler.cli.app import app

    result = CliRunner().invoke(app, [*args, "-c", str(cfg), "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def wait_for(what: str, pred: Callable[[], Any], daemon: subprocess.Popen, log: Path,
             timeout: float = 120) -> Any:  # fmt: skip
    """Poll `pred` until it returns something truthy (a bounded wait, not a timed assertion)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        assert daemon.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text()[-6000:]}")


def instance_env(script: str) -> tuple[dict[str, str], list[str]]:
    """The environment and argv a boot script gives the job (its `export` and `argv=` lines)."""
    env = {k: shlex.split(v)[0] for k, v in re.findall(r"^export (\w+)=(.*)$", script, re.M)}
    m = re.search(r"^argv=\( (.*) \)$", script, re.M)
    assert m, script
    return env, shlex.split(m.group(1))


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_one_job_moves_across_three_clouds_by_price_and_resumes_from_s3(
    clouds: Clouds, tmp_path: Path
) -> None:
    c = clouds
    zones_aws = [f"{REGION}{z}" for z in "abcdef"]
    # Leg 1 prices: AWS cheapest (us-east-1a, then 1b), GCP 0.2626, Azure 0.204246.
    c.set_aws({z: 0.10 + 0.01 * i for i, z in enumerate(zones_aws)})
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(config_text(tmp_path, c))

    # `spotwise prices -o json` on the same config: all three clouds, cheapest first.
    doc = cli(cfg, "prices")
    rows = doc["offerings"]
    prices = [r["price_per_hour"] for r in rows]
    assert prices == sorted(prices) and not doc["errors"]
    assert {r["cloud"] for r in rows} == {"aws", "gcp", "azure"}
    t4 = cli(cfg, "prices", "--gpu", "T4")["offerings"]
    assert {r["cloud"] for r in t4} == {"aws", "gcp", "azure"}
    assert {r["gpu_model"] for r in t4} == {"T4"}
    assert [r["price_per_hour"] for r in t4] == sorted(r["price_per_hour"] for r in t4)
    spot = {(r["cloud"], r["instance_type"]): r["price_per_hour"]
            for r in t4 if r["market"] == "spot"}  # fmt: skip
    assert (t4[0]["cloud"], t4[0]["zone"], t4[0]["price_per_hour"]) == ("aws", "us-east-1a", 0.10)
    assert spot[("gcp", GCP_T4)] == pytest.approx(0.1654 + GCP_T4_REST, abs=1e-6)
    assert spot[("azure", AZ_T4)] == pytest.approx(0.204246, abs=1e-6)

    job_file = tmp_path / "job.toml"
    job_file.write_text(
        f'name = "three-clouds"\ncommand = ["{sys.executable}", "{STORE_COUNTER}", "30", "0.1"]\n'
        'gpus = "T4:1"\nmemory_gb = 15\nspot = "only"\ngpu_hours = 1\n'
        'migrate = "never"\n'  # moves here come from interruptions, not from price following
    )
    log_path = tmp_path / "daemon.log"
    daemon_env = {**os.environ, "SPOTWISE_S3_ENDPOINT_URL": c.moto, "PYTHONPATH": str(ROOT)}
    with log_path.open("w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "daemon", "-c", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, env=daemon_env, cwd=ROOT,
        )  # fmt: skip
    jobs: list[subprocess.Popen] = []
    try:
        from scheduler.cli.app import app

        def submitted() -> str | None:
            r = CliRunner().invoke(app, ["submit", str(job_file), "-c", str(cfg), "-o", "json"])
            return json.loads(r.stdout)["id"] if r.exit_code == 0 else None

        job_id = wait_for("the daemon's database", submitted, daemon, log_path)
        wait_for(  # its heartbeat: until then `status` exits 3 ("no daemon has run")
            "the daemon's heartbeat",
            lambda: CliRunner().invoke(app, ["status", "-c", str(cfg)]).exit_code == 0,
            daemon, log_path,
        )  # fmt: skip

        def row() -> dict[str, Any]:
            return {r["id"]: r for r in cli(cfg, "status")["jobs"]}[job_id]

        def latest_prices(cloud: str, itype: str) -> dict[str, float]:
            with sqlite3.connect(f"file:{tmp_path / 'spotwise.db'}?mode=ro", uri=True) as db:
                got = db.execute(
                    "select pool, price_per_hour from pricesample "
                    "where cloud = ? and instance_type = ? and market = 'spot' order by id",
                    (cloud, itype),
                ).fetchall()
            return dict(got)

        def daemon_sees(cloud: str, itype: str, want: Callable[[str], float]) -> None:
            """The daemon recorded the new prices, and a later price poll has begun (so the
            catalog holding them is the one placement reads)."""
            wait_for(
                f"{cloud} prices in the daemon",
                lambda: (ps := latest_prices(cloud, itype))
                and all(abs(p - want(pool)) < 1e-6 for pool, p in ps.items()),
                daemon, log_path,
            )  # fmt: skip
            polls = c.sku_polls()
            wait_for("the next price poll", lambda: c.sku_polls() > polls, daemon, log_path)

        def leg(
            n: int, cloud: str, prices_move: Callable[[], None] | None = None
        ) -> tuple[dict[str, Any], subprocess.Popen, str, int]:
            """Attempt n runs on `cloud`; then `prices_move` (while it runs, before its job
            starts, so the job's progress does not race the price poll); then the instance
            starts the job as its boot script would, resuming from what the last attempt
            left in the store."""
            r = wait_for(
                f"attempt {n} running on {cloud}",
                lambda: (x := row())["state"] == "RUNNING" and x["attempts"] == n and x,
                daemon, log_path,
            )  # fmt: skip
            assert r["cloud"] == cloud, r
            if prices_move is not None:
                prices_move()
            env, argv = instance_env(c.boot_script(cloud, r["instance_id"]))
            uri = env["SPOTWISE_CHECKPOINT_URI"]
            assert uri == f"s3://{BUCKET}/jobs/{job_id}" == r["checkpoint_uri"]
            assert env["SPOTWISE_ATTEMPT"] == str(n) and env["SPOTWISE_CLOUD"] == cloud
            assert env["SPOTWISE_S3_ENDPOINT_URL"] == env["AWS_ENDPOINT_URL_S3"] == c.moto
            assert argv == [sys.executable, str(STORE_COUNTER), "30", "0.1"]
            # The instance's own credentials and image (trainer installed); the rest is
            # only what the daemon put in the boot script.
            base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
            proc = subprocess.Popen(
                [sys.executable, "-m", "trainer.outcome", "--uri", uri, "--attempt", str(n),
                 "--", *argv],
                env={**base, **AWS_ENV, **env}, cwd=tmp_path,
            )  # fmt: skip
            jobs.append(proc)
            start = wait_for(
                f"attempt {n} started", lambda: c.read(uri, f"starts/{n}.json"), daemon, log_path
            )
            from_step = json.loads(start)["from_step"]
            wait_for(
                f"attempt {n} making progress",
                lambda: json.loads(c.read(uri, "progress.json") or "{}").get("step", 0)
                >= from_step + 2,
                daemon, log_path,
            )  # fmt: skip
            return r, proc, uri, from_step

        def preempted(n: int, cloud: str, r: dict[str, Any], proc: subprocess.Popen,
                      uri: str) -> int:  # fmt: skip
            """The notice: the job checkpoints and exits 75, then the cloud takes the box."""
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 75
            assert json.loads(c.read(uri, f"exits/{n}.json") or "{}")["exit_code"] == 75
            c.interrupt(cloud, r["instance_id"])
            return int(str(c.read(uri, "latest")).removeprefix("step-"))

        # Leg 1: placed on the cheapest of the three (AWS us-east-1a at $0.10/h). While it
        # runs GCP drops to $0.08/h (the runner-up had been AWS us-east-1b at $0.11); then
        # AWS reclaims the instance (spot termination).
        def gcp_drops() -> None:
            c.set_gcp(0.08)
            daemon_sees("gcp", GCP_T4, lambda pool: 0.08)

        r1, p1, uri, from1 = leg(1, "aws", gcp_drops)
        assert (r1["zone"], r1["instance_type"], r1["price_per_hour"]) == (
            "us-east-1a", AWS_T4, pytest.approx(0.10)
        )  # fmt: skip
        assert from1 == 0
        saved1 = preempted(1, "aws", r1, p1, uri)

        # Leg 2: on GCP, resumed from attempt 1's checkpoint in S3. Azure drops to $0.05/h
        # (the runner-up had been GCP's other zone); GCE preempts the VM.
        def azure_drops() -> None:
            c.set_azure(0.05)
            daemon_sees("azure", AZ_T4, lambda pool: 0.05)

        r2, p2, _, from2 = leg(2, "gcp", azure_drops)
        assert r2["price_per_hour"] == pytest.approx(0.08) and from2 == saved1 > 0
        saved2 = preempted(2, "gcp", r2, p2, uri)

        # Leg 3: on Azure. AWS drops below it (1b cheapest, 1a just interrupted anyway);
        # Azure evicts the VM.
        leg4 = {z: 0.035 + 0.001 * i for i, z in enumerate(zones_aws)}
        leg4.update({"us-east-1a": 0.04, "us-east-1b": 0.03})

        def aws_drops() -> None:
            c.set_aws(leg4)
            daemon_sees("aws", AWS_T4, lambda pool: leg4.get(pool.split("/")[1], 0.5))

        r3, p3, _, from3 = leg(3, "azure", aws_drops)
        assert r3["price_per_hour"] == pytest.approx(0.05) and from3 == saved2 > saved1
        saved3 = preempted(3, "azure", r3, p3, uri)

        # Leg 4: back on AWS, in us-east-1b; the job runs to the end and the box powers off.
        r4, p4, _, from4 = leg(4, "aws")
        assert (r4["zone"], r4["price_per_hour"]) == ("us-east-1b", pytest.approx(0.03))
        assert from4 == saved3 > saved2
        assert p4.wait(timeout=60) == 0
        assert c.read(uri, "DONE") is not None
        assert json.loads(c.read(uri, "exits/4.json") or "{}")["exit_code"] == 0
        c.power_off("aws", r4["instance_id"])
        done = wait_for(
            "the job to finish",
            lambda: (x := row())["state"] in ("SUCCEEDED", "FAILED") and x,
            daemon, log_path,
        )  # fmt: skip
        assert done["state"] == "SUCCEEDED", done
    finally:
        for p in jobs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    assert daemon.returncode == 0, log_path.read_text()

    detail = cli(cfg, "show", job_id)
    attempts = detail["attempts"]
    assert [(a["cloud"], a["end_reason"]) for a in attempts] == [
        ("aws", "interrupted"), ("gcp", "interrupted"), ("azure", "interrupted"),
        ("aws", "finished"),
    ]  # fmt: skip
    assert [a["price_per_hour"] for a in attempts] == pytest.approx([0.10, 0.08, 0.05, 0.03])
    starts = [json.loads(c.read(uri, f"starts/{n}.json") or "{}") for n in (1, 2, 3, 4)]
    assert [s["latest"] for s in starts] == [None, f"step-{saved1}", f"step-{saved2}",
                                             f"step-{saved3}"]  # fmt: skip
    assert [s["cloud"] for s in starts] == ["aws", "gcp", "azure", "aws"]
    # Spend at the price paid: each attempt is its price x its billed time; the job the sum.
    total = 0.0
    for a in attempts:
        hours = (
            datetime.fromisoformat(a["ended_at"]) - datetime.fromisoformat(a["started_at"])
        ).total_seconds() / 3600
        assert a["cost_usd"] > 0
        assert a["cost_usd"] == pytest.approx(a["price_per_hour"] * hours, rel=1e-3, abs=1e-6)
        total += a["cost_usd"]
    assert detail["job"]["cost_usd"] == pytest.approx(total, rel=1e-6, abs=1e-6 * len(attempts))
    assert detail["job"]["state"] == "SUCCEEDED"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("gpus", "extra", "model", "memory"),
    [
        ("A100:8", "gpu_memory_gb = 40\nmemory_gb = 600\n", "A100", 40.0),
        ("T4", "memory_gb = 15\n", "T4", 16.0),
    ],
)
@pytest.mark.slow
def test_one_job_file_finds_the_same_canonical_gpu_in_every_catalog(
    clouds: Clouds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    gpus: str, extra: str, model: str, memory: float,
) -> None:  # fmt: skip
    """The job parser and the local market's, AWS's, GCP's and Azure's catalogs speak the
    same GPU names: each cloud's own spelling (p4d/`A100` in GpuInfo, `nvidia-tesla-a100`,
    `ND96asr_v4`, the local CSV) comes out as the one canonical model the job asked for."""
    from providers.aws import AwsProvider, AwsSettings
    from providers.azure import AzureProvider
    from providers.gcp import GcpProvider
    from providers.gcp import fake as fake_gcp
    from providers.local import LocalMarket, LocalSettings
    from scheduler.core.catalog import Catalog
    from scheduler.core.placement import PlacementContext, Requirements, candidates, place
    from scheduler.state.files import load_jobspec
    from tests.support.azure_harness import settings_for
    from tests.support.gcp_harness import settings as gcp_settings

    # GCP's a2-highgpu-8g (8x nvidia-tesla-a100, bundled) in the fake's us-central1-a.
    a2 = ("a2-highgpu-8g", 96, 696320, "nvidia-tesla-a100", 8)
    monkeypatch.setitem(fake_gcp.MACHINE_TYPES, "us-central1-a",
                        [*fake_gcp.MACHINE_TYPES["us-central1-a"], a2])  # fmt: skip
    job_file = tmp_path / "job.toml"
    job_file.write_text(f'name = "same"\ncommand = ["python", "x.py"]\ngpus = "{gpus}"\n{extra}')
    req = Requirements.from_spec(load_jobspec(job_file))
    assert [(g.model, g.count) for g in req.gpus] == [(model, int(gpus.partition(":")[2] or 1))]

    c = clouds
    providers = {
        "local": LocalMarket(LocalSettings(state_dir=tmp_path / "local")),
        "aws": AwsProvider(
            AwsSettings.model_validate({
                "regions": [REGION], "endpoint_url": c.moto, "ami": "ami-0123456789abcdef0",
                "pricing_endpoint_url": c.pricing.url, "max_attempts": 2,
                "instance_types": ["g4dn.*", "g5.*", "p4d.*", "p4de.*", "p5.*"],
            }), owner="tests",
        ),
        "gcp": GcpProvider(gcp_settings(c.gcp), owner="tests"),
        "azure": AzureProvider(settings_for(c.arm, c.retail, c.rg), owner="tests"),
    }  # fmt: skip
    now = datetime.now().astimezone()
    ctx = PlacementContext(now=now)
    types: dict[str, set[str]] = {}
    for name, provider in providers.items():
        cat = Catalog(provider.offerings())
        rows, reason = candidates(req, cat, ctx)
        found = [cat.offering(int(i)) for i in rows]
        assert found, f"{name}: {reason}"
        assert {o.gpu_model for o in found} == {model}, name
        assert all(o.gpu_memory_gb >= memory and o.gpu_count == req.gpus[0].count for o in found)
        assert place(req, cat, ctx).offering in found
        types[name] = {o.instance_type for o in found}
    # ... and each name came from that cloud's own spelling.
    if model == "A100":
        assert {"p4d.24xlarge"} <= types["aws"]
        assert types["gcp"] == {"a2-highgpu-8g"}
        assert types["azure"] == {"Standard_ND96asr_v4"}
    else:
        assert "g4dn.xlarge" in types["aws"]
        assert any(t.endswith("+1xnvidia-tesla-t4") for t in types["gcp"])
        assert "Standard_NC4as_T4_v3" in types["azure"]
    assert types["local"]


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_prices_warnings_are_one_plain_line_per_cloud(clouds: Clouds, tmp_path: Path) -> None:
    """With the three clouds configured, a cloud's warning (AWS's Pricing API denied, so
    the shipped on-demand snapshot is used) is its message, not an object's repr."""
    clouds.set_aws({f"{REGION}a": 0.10})
    clouds.pricing.fail_with = "AccessDeniedException"
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(config_text(tmp_path, clouds))
    doc = cli(cfg, "prices", "--gpu", "T4")
    assert {r["cloud"] for r in doc["offerings"]} == {"aws", "gcp", "azure"}
    aws = [e for e in doc["errors"] if e.startswith("aws: ")]
    assert aws and all("ProviderEvent" not in e for e in doc["errors"]), doc["errors"]
    assert not any(e.startswith("aws: aws:") for e in aws)


_SETTING = re.compile(r"^# ?(\[[\w.]+\]|\w+ = .*)$")


def _commented_sections(text: str) -> tuple[str, str]:
    """deploy/spotwise.toml's commented cloud sections ("# key = value" lines) uncommented,
    and the rest of the file."""
    start = text.index("# [providers.aws]")
    end = text.index("\n[", start)  # the next active section
    block = text[start:end].splitlines()
    settings = "\n".join(m.group(1) for line in block if (m := _SETTING.match(line)))
    return settings, text[:start] + text[end:]


def test_deploy_config_documents_every_key_of_the_three_cloud_sections() -> None:
    import tomllib

    from providers.aws.settings import AwsSettings
    from providers.azure.settings import AzureSettings
    from providers.gcp.settings import GcpSettings
    from scheduler.core.config import parse_config
    from scheduler.state.files import load_config

    path = ROOT / "deploy" / "spotwise.toml"
    text = path.read_text()
    assert load_config(path).providers.aws is None  # shipped commented: the local market runs
    uncommented, active = _commented_sections(text)
    sections = tomllib.loads(uncommented)["providers"]
    for name, model in (("aws", AwsSettings), ("gcp", GcpSettings), ("azure", AzureSettings)):
        assert set(sections[name]) == set(model.model_fields), name
    # Uncommented, they are a valid config next to the file's active sections, once the
    # local market (a simulator, refused beside real clouds without an opt-in) is gone.
    from scheduler.core.errors import UserError

    with pytest.raises(UserError, match="beside_clouds = true"):
        parse_config(active + "\n" + uncommented, str(path))
    production = re.sub(r"\[providers\.local\]\n(?:[^\n\[]+\n)*", "", active)
    cfg = parse_config(production + "\n" + uncommented, str(path))
    assert cfg.providers.aws and cfg.providers.gcp and cfg.providers.azure
    assert cfg.providers.gcp.project == "my-project" and cfg.providers.local is None


def test_readme_three_cloud_config_parses() -> None:
    from scheduler.core.config import parse_config

    readme = (ROOT / "README.md").read_text()
    using = readme[readme.index("## Using it") : readme.index("## Operating spotwise")]
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", using, re.S) if "[providers.gcp]" in b]
    cfg = parse_config(block, "README.md")
    p = cfg.providers
    assert p.local is None and p.aws and p.gcp and p.azure
    assert cfg.daemon.checkpoint_root == "s3://my-checkpoints/spotwise"


def test_instances_get_the_stores_endpoint_never_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scheduler.daemon.checkpoints import CheckpointStores

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-passed-on")
    monkeypatch.delenv("SPOTWISE_S3_ENDPOINT_URL", raising=False)
    assert CheckpointStores().instance_env("s3://b/jobs/j1") == {}  # plain AWS S3
    monkeypatch.setenv("SPOTWISE_S3_ENDPOINT_URL", "https://minio.example:9000")
    stores = CheckpointStores()
    env = stores.instance_env("s3://b/jobs/j1")
    assert env == {
        "SPOTWISE_S3_ENDPOINT_URL": "https://minio.example:9000",
        "AWS_ENDPOINT_URL_S3": "https://minio.example:9000",
    }
    assert stores.instance_env("file:///var/lib/spotwise/ckpt/j1") == {}  # no endpoint to pass
    assert CheckpointStores(s3_endpoint_url="http://10.0.0.5:9000").instance_env("s3://b/p") == {
        "SPOTWISE_S3_ENDPOINT_URL": "http://10.0.0.5:9000",
        "AWS_ENDPOINT_URL_S3": "http://10.0.0.5:9000",
    }
