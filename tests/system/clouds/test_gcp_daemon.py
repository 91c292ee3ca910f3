"""The real daemon (config file -> Daemon -> its own GcpProvider) and CLI against the fakes:
submit, placed on the cheapest adequate GCP offering, preempted, recovered, leak collected,
cancelled. Passes run on a simulated clock (no APScheduler timers, nothing sleeps)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from providers.base import Market
from providers.gcp.fake import FakeGcp
from tests.providers.gcp.test_gcp_cli_prices import write_config

pytestmark = pytest.mark.timeout(90)


def cli(cfg: Path, *args: str) -> Any:
    from scheduler.cli.app import app

    result = CliRunner().invoke(app, [*args, "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    return result.output


def status(cfg: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in json.loads(cli(cfg, "status", "-o", "json"))["jobs"]}


def test_daemon_places_preempts_recovers_and_cancels_on_gcp(fake: FakeGcp, tmp_path: Path):
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    cfg = write_config(tmp_path, fake)
    job_file = tmp_path / "job.toml"
    job_file.write_text('name = "bert"\ncommand = ["python", "train.py"]\ngpus = "T4:1"\n')
    clock = SimClock(datetime.now(UTC))
    daemon = Daemon(cfg, clock=clock)
    job_id = json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"]
    rec = daemon.reconciler
    assert sorted(rec.providers) == ["gcp"]  # no local market slipped in
    assert type(rec.providers["gcp"]).__name__ == "GcpProvider"

    def tick(seconds: float = 5) -> None:
        clock.advance(seconds)
        daemon._run_task("reconcile")
        daemon._run_task("accrue")

    daemon._run_task("poll_prices")
    t4 = [o for o in rec.catalogs.catalog if o.gpu_model == "T4" and o.gpu_count == 1]
    spot = sorted((o for o in t4 if o.market is Market.SPOT), key=lambda o: o.price_per_hour)
    cheapest = spot[0].price_per_hour
    assert spot[0].instance_type == "n1-standard-4+1xnvidia-tesla-t4"
    disk = 200 * 0.10 / 730  # the boot disk (providers/gcp/fixtures/skus.json)
    assert cheapest == pytest.approx(0.1654 + 4 * 0.0116 + 15 * 0.00156 + disk)
    best = {o.pool for o in spot if o.price_per_hour == cheapest}
    tick()
    assert status(cfg)[job_id]["state"] == "LAUNCHING"  # the insert operation is running
    for _ in range(3):
        tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING"
    pool = f"gcp/{row['zone']}/{row['instance_type']}/{row['market']}"
    assert pool in best and row["cloud"] == "gcp"
    first, first_zone = row["instance_id"], row["zone"]
    assert first.startswith("sw-")
    (vm,) = [v for (z, n), v in fake.instances.items() if n == first]
    assert vm["labels"]["spotwise-job"] == job_id.lower()
    assert vm["scheduling"]["provisioningModel"] == "SPOT"

    # GCE reclaims the VM (a compute.instances.preempted operation, the VM deleted), and the
    # other zone is stocked out: its inserts fail inside their operation, seen by describe.
    other = next(z for z in ("us-central1-a", "us-central1-b") if z != first_zone)
    fake.stockout[other] = ("ZONE_RESOURCE_POOL_EXHAUSTED", "no T4 left", 503, 0)
    fake.preempt(first)
    for _ in range(8):
        tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING" and row["recoveries"] == 1
    assert row["instance_id"] != first and row["zone"] == first_zone
    detail = json.loads(cli(cfg, "show", job_id, "-o", "json"))
    ends = [(a["zone"], a["end_reason"]) for a in detail["attempts"]]
    assert ends == [(first_zone, "interrupted"), (other, "launch_failed"), (first_zone, None)]
    kinds = [e["kind"] for e in detail["events"]]
    assert "attempt_interrupted" in kinds and "attempt_launch_failed" in kinds
    events = json.loads(cli(cfg, "events", "-o", "json"))["events"]
    assert any(
        f"gcp/{other}/" in e["message"] and "ZONE_RESOURCE_POOL_EXHAUSTED" in e["message"]
        for e in events
        if e["kind"] == "pool_unavailable"
    )

    # A VM labelled ours (this database's install id, this job) that belongs to no live
    # attempt is a leak: deleted after the grace. One with only the owner label is left.
    fake.add_instance("us-central1-b", "sw-ghost", {
        "spotwise-owner": "spotwise", "spotwise-install": rec.install_id,
        "spotwise-job": job_id, "spotwise-attempt": f"{job_id}-a9"})  # fmt: skip
    fake.add_instance("us-central1-b", "sw-other", {"spotwise-owner": "spotwise",
                                                     "spotwise-attempt": "ghost-a1"})  # fmt: skip
    tick(31)  # the next leak sweep (at most grace / 4 apart) sees it: its grace starts
    assert any(n == "sw-ghost" for _, n in fake.instances)
    tick(150)
    assert not any(n == "sw-ghost" for _, n in fake.instances)
    assert any(n == "sw-other" for _, n in fake.instances)

    second = row["instance_id"]
    cli(cfg, "cancel", job_id)
    for _ in range(3):
        tick()
    assert not any(n == second for _, n in fake.instances)
    row = status(cfg)[job_id]
    assert row["state"] == "CANCELLED" and row["instance_id"] is None


def test_daemon_job_exit_succeeds_and_the_stopped_vm_is_collected(fake: FakeGcp, tmp_path: Path):
    """The startup-script records exits/1.json and powers off: GCE shows the VM TERMINATED
    (no preemption), the job SUCCEEDS, and the stopped VM (its disk still billed) is deleted
    by leak collection once no live attempt owns it."""
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon
    from trainer.contract import exit_doc, exit_name, parse_uri

    cfg = write_config(tmp_path, fake)
    job_file = tmp_path / "job.toml"
    job_file.write_text('name = "done"\ncommand = ["python", "train.py"]\ngpus = "L4:1"\n')
    clock = SimClock(datetime.now(UTC))
    daemon = Daemon(cfg, clock=clock)
    job_id = json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"]

    def tick(seconds: float = 5) -> None:
        clock.advance(seconds)
        daemon._run_task("reconcile")
        daemon._run_task("accrue")

    daemon._run_task("poll_prices")
    for _ in range(4):
        tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING" and row["instance_type"] == "g2-standard-4"
    vm = row["instance_id"]
    store = parse_uri(row["checkpoint_uri"])
    assert store.path is not None
    record = store.file(exit_name(1))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(exit_doc(1, 0))
    fake.guest_shutdown(vm)
    for _ in range(3):
        tick()
    assert status(cfg)[job_id]["state"] == "SUCCEEDED"
    assert any(n == vm for _, n in fake.instances)  # stopped, not yet deleted
    tick(31)  # a leak sweep sees it (sweeps are at most grace / 4 apart)
    tick(150)
    tick()
    assert not any(n == vm for _, n in fake.instances)
