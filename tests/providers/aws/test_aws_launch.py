"""Launch against moto: markets, idempotency, gangs, tags, user data, and the error split
(capacity/quota vs. a rejected request vs. a fatal account problem)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from providers.aws.provider import TAG_TOKEN, client_token
from providers.base import (
    TAG_NODE,
    CapacityUnavailable,
    FatalError,
    InstanceState,
    LaunchRejected,
    Market,
    QuotaExceeded,
)
from tests.support.aws_fixtures import (
    REGION,
    ec2_client,
    fail_times,
    launch_request,
    offering,
    user_data,
)

pytestmark = pytest.mark.timeout(60)


def all_instances(moto: str) -> list[dict[str, Any]]:
    res = ec2_client(moto).describe_instances()["Reservations"]
    return [i for r in res for i in r["Instances"]]


def capture(session: boto3.Session, operation: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    session.events.register(
        f"provide-client-params.ec2.{operation}", lambda params, **_: sent.append(dict(params))
    )
    return sent


def test_spot_launch_tags_user_data_and_options(make_provider, moto, session):
    sent = capture(session, "RunInstances")
    p = make_provider(prices=False)
    req = launch_request(command=["python", "train.py", "--name", "it's a $HOME; rm -rf /"])
    (inst,) = p.launch(req)
    assert inst.id.startswith("i-") and inst.node == 0
    assert (inst.cloud, inst.region, inst.zone) == ("aws", REGION, "us-east-1b")
    assert inst.instance_type == "g5.xlarge" and inst.market is Market.SPOT
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
    assert inst.pool == req.offering.pool
    (raw,) = all_instances(moto)
    assert raw["InstanceLifecycle"] == "spot"
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags["spotwise-job"] == "job-1"
    assert tags["spotwise-attempt"] == "job-1.attempt-1"
    assert tags["spotwise-owner"] == "tests"
    assert tags["Name"] == "spotwise-job-1-job-1.attempt-1"
    assert tags[TAG_TOKEN] == "job-1.attempt-1"
    assert tags[TAG_NODE] == "0"
    assert inst.tags == tags
    script = user_data(moto, inst.id)
    assert script.startswith("#!/bin/bash\n")
    assert "export SPOTWISE_CLOUD=aws" in script
    assert "export SPOTWISE_JOB_ID=job-1" in script
    assert "export SPOTWISE_CHECKPOINT_URI=s3://bucket/ckpt/job-1" in script
    assert "argv=( python train.py --name 'it'\"'\"'s a $HOME; rm -rf /' )" in script
    (params,) = sent
    assert params["ClientToken"] == "job-1.attempt-1"
    assert (params["MinCount"], params["MaxCount"]) == (1, 1)
    assert params["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        },
    }
    assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert params["MetadataOptions"]["HttpTokens"] == "required"
    assert params["ImageId"] == "ami-0123456789abcdef0"
    assert params["Placement"] == {"AvailabilityZone": "us-east-1b"}
    assert [s["ResourceType"] for s in params["TagSpecifications"]] == ["instance", "volume"]


def test_on_demand_launch(make_provider, moto, session):
    sent = capture(session, "RunInstances")
    p = make_provider(prices=False)
    (inst,) = p.launch(
        launch_request(offer=offering("p4d.24xlarge", "us-east-1a", Market.ON_DEMAND))
    )
    assert inst.market is Market.ON_DEMAND
    assert inst.pool == "aws/us-east-1a/p4d.24xlarge/on-demand"
    (raw,) = all_instances(moto)
    assert "InstanceLifecycle" not in raw
    assert "InstanceMarketOptions" not in sent[0]


@pytest.mark.slow
def test_same_token_twice_is_one_instance(make_provider, moto, session):
    sent = capture(session, "RunInstances")
    p = make_provider(prices=False)
    (a,) = p.launch(launch_request(token="job-1.attempt-7"))
    (b,) = p.launch(launch_request(token="job-1.attempt-7"))
    assert a.id == b.id
    # A second provider (the daemon restarted) adopts rather than launches.
    (c,) = make_provider(prices=False).launch(launch_request(token="job-1.attempt-7"))
    assert c.id == a.id
    assert len(all_instances(moto)) == 1
    assert len(sent) == 1
    (d,) = p.launch(launch_request(token="job-1.attempt-8"))
    assert d.id != a.id and len(all_instances(moto)) == 2


def test_long_tokens_become_valid_client_tokens(make_provider, moto, session):
    sent = capture(session, "RunInstances")
    token = "job-" + "x" * 100 + " with spaces"
    (inst,) = make_provider(prices=False).launch(launch_request(token=token))
    ct = sent[0]["ClientToken"]
    assert len(ct) <= 64 and ct == client_token(token) and ct.isascii()
    assert inst.tags[TAG_TOKEN] == ct
    assert [i.id for i in make_provider(prices=False).find_by_token(token)] == [inst.id]


@pytest.mark.slow
def test_configured_network_profile_and_key(make_provider, moto, session):
    ec2 = ec2_client(moto)
    subnet = next(
        s for s in ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == "us-east-1b"
    )
    sg = ec2.create_security_group(GroupName="spotwise", Description="jobs")["GroupId"]
    ec2.create_key_pair(KeyName="ops")
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto)
    iam.create_instance_profile(InstanceProfileName="spotwise-node")
    sent = capture(session, "RunInstances")
    p = make_provider(
        prices=False,
        subnet_ids=[subnet["SubnetId"], "subnet-0000000000000000f"],
        security_group_ids=[sg, "sg-0000000000000000f"],
        instance_profile="spotwise-node",
        key_name="ops",
    )
    (inst,) = p.launch(launch_request())
    params = sent[0]
    assert params["SubnetId"] == subnet["SubnetId"]
    assert params["SecurityGroupIds"] == [sg]  # only the groups that exist in this region
    assert params["IamInstanceProfile"] == {"Name": "spotwise-node"}
    assert params["KeyName"] == "ops"
    (raw,) = all_instances(moto)
    assert raw["SubnetId"] == subnet["SubnetId"] and inst.zone == "us-east-1b"
    # No subnet in the offering's zone: this request is wrong (not the pool, not the account).
    with pytest.raises(LaunchRejected, match="no configured subnet in zone us-east-1c"):
        p.launch(launch_request(token="t2", offer=offering(zone="us-east-1c")))


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", CapacityUnavailable),
        ("SpotMaxPriceTooLow", CapacityUnavailable),
        ("MaxSpotInstanceCountExceeded", QuotaExceeded),
        ("VcpuLimitExceeded", QuotaExceeded),
    ],
)
@pytest.mark.slow
def test_capacity_and_quota_errors_name_the_pool(make_provider, moto, session, code, kind):
    calls = fail_times(
        session, "RunInstances", code, times=99, status=500 if code[0] == "I" else 400
    )
    p = make_provider(prices=False)
    offer = offering("p5.48xlarge", "us-east-1c", Market.SPOT)
    with pytest.raises(kind) as exc:
        p.launch(launch_request(offer=offer))
    assert type(exc.value) is kind
    assert exc.value.pool == offer.pool == "aws/us-east-1c/p5.48xlarge/spot"
    assert code in str(exc.value) and "p5.48xlarge" in str(exc.value)
    assert all_instances(moto) == []
    if code == "InsufficientInstanceCapacity":
        # EC2 sends it as a 500, but it is an answer about the pool: no retry, move on.
        assert calls["n"] == 1


@pytest.mark.parametrize(
    "code",
    [
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "InvalidUserData.Malformed",
        "IdempotentParameterMismatch",
        "InvalidPlacementGroup.Unknown",
    ],
)
@pytest.mark.slow
def test_a_wrong_request_is_rejected_not_capacity(make_provider, moto, session, code):
    fail_times(session, "RunInstances", code, times=99, status=400)
    with pytest.raises(LaunchRejected, match=code.replace(".", r"\.")) as exc:
        make_provider(prices=False).launch(launch_request())
    assert not isinstance(exc.value, CapacityUnavailable | FatalError)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("InvalidAMIID.Malformed", 400),
        ("InvalidAMIID.NotFound", 400),
        ("UnauthorizedOperation", 403),
        ("AuthFailure", 401),
        ("InvalidSubnetID.NotFound", 400),
    ],
)
@pytest.mark.slow
def test_account_or_config_failures_are_fatal(make_provider, moto, session, code, status):
    fail_times(session, "RunInstances", code, times=99, status=status)
    with pytest.raises(FatalError, match=code.replace(".", r"\.")) as exc:
        make_provider(prices=False).launch(launch_request())
    assert not isinstance(exc.value, CapacityUnavailable | LaunchRejected)


def test_invalid_env_name_oversize_or_empty_command_is_rejected(make_provider, moto):
    from providers.aws.userdata import MAX_USER_DATA
    from providers.base import LaunchRequest

    p = make_provider(prices=False)
    good = launch_request()
    bad_env = LaunchRequest(good.token, good.offering, good.command, {"BAD-NAME": "x"}, good.tags)
    with pytest.raises(LaunchRejected, match="BAD-NAME"):
        p.launch(bad_env)
    with pytest.raises(LaunchRejected, match="empty"):
        p.launch(LaunchRequest("t3", good.offering, [], good.env, good.tags))
    huge = LaunchRequest("t4", good.offering, ["x" * MAX_USER_DATA], good.env, good.tags)
    with pytest.raises(LaunchRejected, match="16 KB"):
        p.launch(huge)
    with pytest.raises(LaunchRejected, match="count"):
        p.launch(launch_request(token="t5", count=0))
    assert all_instances(moto) == []


@pytest.mark.slow
def test_a_gang_is_one_request_all_or_nothing_with_node_tags(
    make_provider, moto, session, placement_groups
):
    sent = capture(session, "RunInstances")
    p = make_provider(prices=False)
    req = launch_request(token="job-2.attempt-1", count=3, placement_group="spotwise-pg")
    gang = p.launch(req)
    (params,) = sent
    assert (params["MinCount"], params["MaxCount"]) == (3, 3)
    assert params["ClientToken"] == "job-2.attempt-1"
    assert params["Placement"] == {"AvailabilityZone": "us-east-1b", "GroupName": "spotwise-pg"}
    assert "SPOTWISE_NODE" in params["UserData"]  # each node learns its index on the box
    assert [i.node for i in gang] == [0, 1, 2] and len({i.id for i in gang}) == 3
    raw = {r["InstanceId"]: {t["Key"]: t["Value"] for t in r["Tags"]} for r in all_instances(moto)}
    assert {i.id: raw[i.id][TAG_NODE] for i in gang} == {i.id: str(i.node) for i in gang}
    # A retry, or a restarted daemon, gets the same gang back; nothing new is launched.
    again = make_provider(prices=False).launch(req)
    assert [i.id for i in again] == [i.id for i in gang] and len(sent) == 1
    found = p.find_by_token(req.token, "us-east-1")
    assert [(i.id, i.node) for i in found] == [(i.id, i.node) for i in gang]
    assert [i.node for i in p.describe([i.ref for i in gang])] == [0, 1, 2]


def test_a_gang_without_capacity_launches_nothing(make_provider, moto, session, placement_groups):
    fail_times(session, "RunInstances", "InsufficientInstanceCapacity", times=99, status=500)
    req = launch_request(count=4, placement_group="spotwise-pg")
    with pytest.raises(CapacityUnavailable) as exc:
        make_provider(prices=False).launch(req)
    assert exc.value.pool == req.offering.pool and all_instances(moto) == []


def test_a_jobs_price_cap_goes_to_ec2_as_the_spot_max_price(make_provider, moto, session):
    """SpotMarketOptions.MaxPrice is a string of USD per hour (botocore's ec2 model)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    assert model.shape_for("SpotMarketOptions").members["MaxPrice"].type_name == "string"
    sent = capture(session, "RunInstances")
    p = make_provider(prices=False)
    p.launch(launch_request(max_price_per_hour=1.25))
    assert sent[0]["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "1.25"
    p.launch(launch_request(token="job-1.attempt-2", max_price_per_hour=0.123456789))
    assert sent[1]["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "0.12346"
    od = offering("p4d.24xlarge", "us-east-1a", Market.ON_DEMAND)
    p.launch(launch_request(token="job-1.attempt-3", offer=od, max_price_per_hour=50.0))
    assert "InstanceMarketOptions" not in sent[2]  # on-demand takes no cap
