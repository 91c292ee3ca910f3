"""A gang on AWS (moto): the real daemon and AwsProvider launch N instances with one
RunInstances into a cluster placement group under one token; EC2 reclaiming one node stops
the whole gang, which is launched again whole; the group is collected after the job."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.support.aws_fixtures import ec2_client, moto_instance
from tests.system.clouds.test_aws_daemon import cli, moto_prices, status, write_config

pytestmark = pytest.mark.timeout(90)
__all__ = ["moto_prices"]


def _gang(moto: str, job_id: str) -> list[dict]:
    out = []
    for r in ec2_client(moto).describe_instances(
        Filters=[{"Name": "tag:spotwise-job", "Values": [job_id]}]
    )["Reservations"]:
        out.extend(r["Instances"])
    return out


@pytest.mark.slow
def test_a_gang_launches_into_a_placement_group_and_recovers_from_a_node_loss(
    moto, pricing, moto_prices, placement_groups, tmp_path
):
    from moto.ec2.models.instances import StateReason

    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    cfg = write_config(tmp_path, moto, pricing.url)
    # The whole-gang path (a lost node replaced alone is the conformance suite's and the
    # gang recovery suites' subject).
    cfg.write_text(cfg.read_text() + '\n[gangs]\nrecovery = "whole"\n')
    job_file = tmp_path / "gang.toml"
    job_file.write_text(
        'name = "gang"\ncommand = ["python", "-m", "trainer", "--nnodes", "3"]\n'
        'gpus = "A10G:1"\nnodes = 3\n'
    )
    clock = SimClock(datetime.now(UTC))
    daemon = Daemon(cfg, clock=clock)
    job_id = json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"]

    def tick(seconds: float = 5) -> None:
        clock.advance(seconds)
        daemon._run_task("reconcile")
        daemon._run_task("accrue")

    daemon._run_task("poll_prices")
    for _ in range(3):
        tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING", row
    gang = [i for i in _gang(moto, job_id) if i["State"]["Name"] == "running"]
    assert len(gang) == 3
    group = f"spotwise-{job_id}-a1"
    assert placement_groups["created"] == [(group, "cluster")]
    assert placement_groups["run"] == [(group, 3)]  # one RunInstances, MinCount = 3
    tokens = {t["Value"] for i in gang for t in i["Tags"] if t["Key"] == "spotwise-token"}
    assert len(tokens) == 1  # one token family, one all-or-nothing request
    assert sorted(i["AmiLaunchIndex"] for i in gang) == [0, 1, 2]
    shown = json.loads(cli(cfg, "show", job_id, "-o", "json"))["attempts"][0]
    assert [n["node"] for n in shown["instances"]] == [0, 1, 2]

    # EC2 reclaims node 1: the other two are stopped after the common checkpoint, then the
    # gang is launched again, whole.
    lost = next(i["InstanceId"] for i in gang if i["AmiLaunchIndex"] == 1)
    inst = moto_instance(lost)
    inst.terminate()
    inst.state_reason = StateReason(
        "Server.SpotInstanceTermination", "Server.SpotInstanceTermination"
    )
    for _ in range(4):
        tick()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING" and row["recoveries"] == 1, row
    detail = json.loads(cli(cfg, "show", job_id, "-o", "json"))
    assert [a["end_reason"] for a in detail["attempts"]] == ["interrupted", None]
    live = [i for i in _gang(moto, job_id) if i["State"]["Name"] == "running"]
    assert len(live) == 3 and {i["InstanceId"] for i in live}.isdisjoint(
        i["InstanceId"] for i in gang
    )
    assert "gang_stop" in {e["kind"] for e in detail["events"]}
    assert placement_groups["run"][-1] == (f"spotwise-{job_id}-a2", 3)
