"""describe / list_tagged / find_by_token / terminate, with EC2's own actions done in moto."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from providers.base import (
    TAG_OWNER,
    EndReason,
    InstanceState,
    Market,
    ResourceKind,
    ResourceRef,
)
from tests.support.aws_fixtures import (
    REGION,
    ec2_client,
    eventbridge_rebalance,
    eventbridge_warning,
    launch_request,
    moto_instance,
    offering,
    ref,
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
    (inst,) = p.launch(launch_request())
    (seen,) = p.describe([inst.ref])
    assert seen.state is InstanceState.RUNNING and seen.end_reason is None
    assert seen.market is Market.SPOT and seen.zone == "us-east-1b"
    assert seen.tags["spotwise-job"] == "job-1"
    assert seen.launched_at is not None
    end_as(inst.id, "Server.SpotInstanceTermination")
    (ended,) = p.describe([inst.ref])
    assert ended.state is InstanceState.ENDED
    assert ended.end_reason is EndReason.INTERRUPTED
    assert ended.ended_at is not None
    assert ended.pool == "aws/us-east-1b/g5.xlarge/spot"


def test_user_termination_and_job_exit(make_provider, moto):
    p = make_provider(prices=False)
    (a,) = p.launch(launch_request(token="a"))
    (b,) = p.launch(launch_request(token="b"))
    p.terminate([a.ref])
    # The job finished, tagged its exit code and powered the box off.
    ec2_client(moto).create_tags(
        Resources=[b.id], Tags=[{"Key": "spotwise-exit-code", "Value": "3"}]
    )
    end_as(b.id, "Client.InstanceInitiatedShutdown")
    got = {i.id: i for i in p.describe([a.ref, b.ref])}
    assert got[a.id].end_reason is EndReason.TERMINATED
    assert got[a.id].ended_at is not None and got[a.id].ended_at.tzinfo is not None
    assert got[b.id].end_reason is EndReason.EXITED and got[b.id].exit_code == 3


def test_unknown_ids_come_back_not_found(make_provider, moto):
    p = make_provider(prices=False)
    (live,) = p.launch(launch_request())
    unknown = ResourceRef("i-0123456789abcdef0", REGION, "us-east-1b")
    got = p.describe([unknown, live.ref])
    assert [i.id for i in got] == [unknown.id, live.id]
    assert got[0].state is InstanceState.NOT_FOUND and got[0].end_reason is None
    assert (got[0].region, got[0].zone) == (REGION, "us-east-1b")
    assert got[1].state is InstanceState.RUNNING
    assert p.describe([]) == []


def test_not_yet_visible_is_reported_honestly(make_provider, moto, session):
    """describe_instances is eventually consistent; a fresh id can be missing for a while.
    The adapter says NOT_FOUND (keeping the ref's launch time); the scheduler owns the grace,
    for as long as capabilities.visibility_delay says."""
    hide = {"on": False}

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        if hide["on"]:
            parsed["Reservations"] = []

    # Hooks must be on the session before the provider makes its clients.
    session.events.register("after-call.ec2.DescribeInstances", hook)
    p = make_provider(prices=False)
    (inst,) = p.launch(launch_request())
    hide["on"] = True
    (seen,) = p.describe([inst.ref])
    assert seen.state is InstanceState.NOT_FOUND and seen.id == inst.id
    assert seen.launched_at == inst.launched_at
    assert p.capabilities.visibility_delay.total_seconds() >= 60
    hide["on"] = False
    (seen,) = p.describe([inst.ref])
    assert seen.state is InstanceState.RUNNING


@pytest.mark.slow
def test_nothing_lives_in_memory_a_fresh_provider_sees_everything(make_provider, moto):
    """Restart safety: regions come from the refs (or every configured region)."""
    regions = [REGION, "us-west-2"]
    (west,) = make_provider(prices=False, regions=regions).launch(
        launch_request(token="w", offer=offering("g5.xlarge", "us-west-2a"))
    )
    fresh = make_provider(prices=False, regions=regions)
    (seen,) = fresh.describe([west.ref])
    assert seen.state is InstanceState.RUNNING and seen.region == "us-west-2"
    # A ref that names no region (older records) is looked for everywhere.
    (bare,) = make_provider(prices=False, regions=regions).describe([ResourceRef(west.id)])
    assert bare.state is InstanceState.RUNNING and bare.zone == "us-west-2a"
    # A ref naming the wrong region is simply not found there.
    (wrong,) = fresh.describe([ref(west.id, REGION)])
    assert wrong.state is InstanceState.NOT_FOUND


@pytest.mark.slow
def test_list_tagged_instances_of_the_owner(make_provider, moto):
    p = make_provider(prices=False)
    (mine,) = p.launch(launch_request(token="m1"))
    (dead,) = p.launch(launch_request(token="m2"))
    (other,) = p.launch(launch_request(token="o1", owner="someone-else"))
    p.terminate([dead.ref])
    tagged = p.list_tagged("tests")
    assert {t.ref.id for t in tagged} == {mine.id}  # terminated ones are not listed
    (t,) = tagged
    assert t.live and t.ref.kind is ResourceKind.INSTANCE and t.ref.region == REGION
    assert t.tags[TAG_OWNER] == "tests" and t.created_at == mine.launched_at
    moto_instance(mine.id).stop()  # stopped still costs (EBS): listed, not live
    (stopped,) = p.list_tagged("tests")
    assert not stopped.live
    p.terminate([stopped.ref])
    assert p.list_tagged("tests") == []
    assert {t.ref.id for t in p.list_tagged("someone-else")} == {other.id}
    assert p.list_tagged("nobody") == []


def test_loose_tagged_volumes_are_listed_and_deleted(make_provider, moto):
    ec2 = ec2_client(moto)
    tags = [{"ResourceType": "volume", "Tags": [{"Key": TAG_OWNER, "Value": "tests"}]}]
    vol = ec2.create_volume(AvailabilityZone="us-east-1b", Size=8, TagSpecifications=tags)
    ec2.create_volume(AvailabilityZone="us-east-1b", Size=8)  # not ours
    p = make_provider(prices=False)
    (disk,) = [t for t in p.list_tagged("tests") if t.ref.kind is ResourceKind.DISK]
    assert disk.ref.id == vol["VolumeId"] and disk.ref.region == REGION and disk.live
    p.terminate([disk.ref])
    p.terminate([disk.ref])  # gone: not an error
    assert p.list_tagged("tests") == []


@pytest.mark.slow
def test_find_by_token_and_across_regions(make_provider, moto):
    p = make_provider(prices=False, regions=[REGION, "us-west-2"])
    west = offering("g5.xlarge", "us-west-2a")
    (inst,) = p.launch(launch_request(token="job-9.attempt-1", offer=west))
    assert inst.region == "us-west-2"
    # A fresh provider (after a crash) knows nothing and must look in every region ...
    fresh = make_provider(prices=False, regions=[REGION, "us-west-2"])
    (found,) = fresh.find_by_token("job-9.attempt-1")
    assert found.id == inst.id and found.region == "us-west-2"
    # ... unless the caller knows the region.
    assert [i.id for i in fresh.find_by_token("job-9.attempt-1", "us-west-2")] == [inst.id]
    assert fresh.find_by_token("job-9.attempt-1", REGION) == []
    assert fresh.find_by_token("job-9.attempt-2") == []
    fresh.terminate([inst.ref])
    (after,) = fresh.describe([inst.ref])
    assert after.end_reason is EndReason.TERMINATED
    # Ended instances stay findable by their token (EC2 keeps the ClientToken for 24 h).
    assert [i.state for i in fresh.find_by_token("job-9.attempt-1")] == [InstanceState.ENDED]


@pytest.mark.slow
def test_terminate_is_idempotent(make_provider, moto):
    p = make_provider(prices=False)
    (inst,) = p.launch(launch_request())
    p.terminate([inst.ref])
    p.terminate(
        [inst.ref, inst.ref, ref("i-0123456789abcdef0"), ResourceRef("i-0fedcba9876543210")]
    )
    p.terminate([])
    (seen,) = p.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.TERMINATED
    # One unknown id does not spare the others (EC2 fails the whole call for it).
    (other,) = p.launch(launch_request(token="other"))
    p.terminate([ref("i-0123456789abcdef0"), other.ref])
    (seen,) = p.describe([other.ref])
    assert seen.end_reason is EndReason.TERMINATED


@pytest.mark.slow
def test_interruption_warning_from_sqs_sets_notice_at(make_provider, moto):
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto)
    url = sqs.create_queue(QueueName="spot-interruptions")["QueueUrl"]
    p = make_provider(prices=False, sqs_queue_url=url, sqs_endpoint_url=moto)
    (a,) = p.launch(launch_request(token="a"))
    (b,) = p.launch(launch_request(token="b"))
    when = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
    sqs.send_message(QueueUrl=url, MessageBody=eventbridge_warning(a.id, when))
    sqs.send_message(QueueUrl=url, MessageBody='{"detail-type": "EC2 Instance State-change"}')
    got = {i.id: i for i in p.describe([a.ref, b.ref])}
    assert got[a.id].notice_at == when and got[a.id].state is InstanceState.RUNNING
    assert got[b.id].notice_at is None
    # Messages are consumed; the notice is remembered until the instance is gone.
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert [i.notice_at for i in p.find_by_token("a")] == [when]
    end_as(a.id, "Server.SpotInstanceTermination")
    (ended,) = p.describe([a.ref])
    assert ended.end_reason is EndReason.INTERRUPTED


@pytest.mark.slow
def test_rebalance_recommendation_from_sqs_sets_early_signal_at(make_provider, moto):
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto)
    url = sqs.create_queue(QueueName="spot-interruptions")["QueueUrl"]
    p = make_provider(prices=False, sqs_queue_url=url, sqs_endpoint_url=moto)
    (a,) = p.launch(launch_request(token="a"))
    early = datetime(2026, 11, 29, 11, 50, 0, tzinfo=UTC)
    sqs.send_message(QueueUrl=url, MessageBody=eventbridge_rebalance(a.id, early))
    (seen,) = p.describe([a.ref])
    assert seen.early_signal_at == early and seen.notice_at is None
    assert seen.state is InstanceState.RUNNING
    when = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
    sqs.send_message(QueueUrl=url, MessageBody=eventbridge_warning(a.id, when))
    (seen,) = p.describe([a.ref])
    assert (seen.early_signal_at, seen.notice_at) == (early, when)
