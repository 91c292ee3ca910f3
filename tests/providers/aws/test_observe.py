"""describe / list_tagged / find_by_token / terminate, with EC2's own actions done in moto."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from providers.base import EndReason, InstanceState, Market
from tests.providers.aws.conftest import (
    REGION,
    ec2_client,
    eventbridge_warning,
    launch_request,
    moto_instance,
    offering,
)

pytestmark = pytest.mark.timeout(60)


def end_as(instance_id: str, code: str, message: str = "") -> None:
    """What EC2 does by itself: reclaim a spot box, or power off when the job ends."""
    from moto.ec2.models.instances import StateReason

    inst = moto_instance(instance_id)
    inst.terminate()
    inst.state_reason = StateReason(message or code, code)


def test_describe_running_then_interrupted(make_provider, moto):
    p = make_provider(prices=False)
    inst = p.launch(launch_request())
    (seen,) = p.describe([inst.id])
    assert seen.state is InstanceState.RUNNING and seen.end_reason is None
    assert seen.market is Market.SPOT and seen.zone == "us-east-1b"
    assert seen.tags["spotwise-job"] == "job-1"
    assert seen.launched_at is not None
    end_as(inst.id, "Server.SpotInstanceTermination")
    (ended,) = p.describe([inst.id])
    assert ended.state is InstanceState.ENDED
    assert ended.end_reason is EndReason.INTERRUPTED
    assert ended.ended_at is not None
    assert ended.pool == "aws/us-east-1b/g5.xlarge/spot"


def test_user_termination_and_job_exit(make_provider, moto):
    p = make_provider(prices=False)
    a = p.launch(launch_request(token="a"))
    b = p.launch(launch_request(token="b"))
    p.terminate([a.id])
    # The job finished, tagged its exit code and powered the box off.
    ec2_client(moto).create_tags(
        Resources=[b.id], Tags=[{"Key": "spotwise-exit-code", "Value": "3"}]
    )
    end_as(b.id, "Client.InstanceInitiatedShutdown")
    got = {i.id: i for i in p.describe([a.id, b.id])}
    assert got[a.id].end_reason is EndReason.TERMINATED
    assert got[a.id].ended_at is not None and got[a.id].ended_at.tzinfo is not None
    assert got[b.id].end_reason is EndReason.EXITED and got[b.id].exit_code == 3


def test_unknown_ids_come_back_ended(make_provider, moto):
    p = make_provider(prices=False)
    live = p.launch(launch_request())
    got = p.describe(["i-0123456789abcdef0", live.id])
    assert [i.id for i in got] == ["i-0123456789abcdef0", live.id]
    assert got[0].state is InstanceState.ENDED and got[0].end_reason is EndReason.UNKNOWN
    assert got[1].state is InstanceState.RUNNING
    assert p.describe([]) == []


def test_just_launched_but_not_yet_visible_stays_pending(make_provider, moto, session, clock):
    """describe_instances is eventually consistent; a fresh id can be missing for seconds."""
    hide = {"on": False}

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        if hide["on"]:
            parsed["Reservations"] = []

    # Hooks must be on the session before the provider makes its clients.
    session.events.register("after-call.ec2.DescribeInstances", hook)
    p = make_provider(prices=False)
    inst = p.launch(launch_request())
    hide["on"] = True
    clock.advance(20)
    (seen,) = p.describe([inst.id])
    assert seen.state is InstanceState.PENDING and seen.id == inst.id
    clock.advance(600)
    (gone,) = p.describe([inst.id])
    assert gone.state is InstanceState.ENDED and gone.end_reason is EndReason.UNKNOWN


def test_list_tagged_only_live_instances_of_the_owner(make_provider, moto):
    p = make_provider(prices=False)
    mine = p.launch(launch_request(token="m1"))
    dead = p.launch(launch_request(token="m2"))
    other = p.launch(launch_request(token="o1", owner="someone-else"))
    p.terminate([dead.id])
    assert {i.id for i in p.list_tagged("tests")} == {mine.id}
    assert {i.id for i in p.list_tagged("someone-else")} == {other.id}
    assert p.list_tagged("nobody") == []


def test_find_by_token_and_across_regions(make_provider, moto):
    p = make_provider(prices=False, regions=[REGION, "us-west-2"])
    west = offering("g5.xlarge", "us-west-2a")
    inst = p.launch(launch_request(token="job-9.attempt-1", offer=west))
    assert inst.region == "us-west-2"
    # A fresh provider (after a crash) knows nothing and must look in every region.
    fresh = make_provider(prices=False, regions=[REGION, "us-west-2"])
    found = fresh.find_by_token("job-9.attempt-1")
    assert found is not None and found.id == inst.id and found.region == "us-west-2"
    assert fresh.find_by_token("job-9.attempt-2") is None
    (seen,) = make_provider(prices=False, regions=[REGION, "us-west-2"]).describe([inst.id])
    assert seen.state is InstanceState.RUNNING and seen.region == "us-west-2"
    fresh2 = make_provider(prices=False, regions=[REGION, "us-west-2"])
    fresh2.terminate([inst.id])
    (after,) = fresh2.describe([inst.id])
    assert after.end_reason is EndReason.TERMINATED


def test_terminate_is_idempotent(make_provider, moto):
    p = make_provider(prices=False)
    inst = p.launch(launch_request())
    p.terminate([inst.id])
    p.terminate([inst.id, inst.id, "i-0123456789abcdef0"])
    p.terminate([])
    (seen,) = p.describe([inst.id])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.TERMINATED


def test_interruption_warning_from_sqs_sets_notice_at(make_provider, moto):
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto)
    url = sqs.create_queue(QueueName="spot-interruptions")["QueueUrl"]
    p = make_provider(prices=False, sqs_queue_url=url, sqs_endpoint_url=moto)
    a = p.launch(launch_request(token="a"))
    b = p.launch(launch_request(token="b"))
    when = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
    sqs.send_message(QueueUrl=url, MessageBody=eventbridge_warning(a.id, when))
    sqs.send_message(QueueUrl=url, MessageBody='{"detail-type": "EC2 Instance State-change"}')
    got = {i.id: i for i in p.describe([a.id, b.id])}
    assert got[a.id].notice_at == when and got[a.id].state is InstanceState.RUNNING
    assert got[b.id].notice_at is None
    # Messages are consumed; the notice is remembered until the instance is gone.
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert {i.id: i.notice_at for i in p.list_tagged("tests")}[a.id] == when
    end_as(a.id, "Server.SpotInstanceTermination")
    (ended,) = p.describe([a.id])
    assert ended.end_reason is EndReason.INTERRUPTED
