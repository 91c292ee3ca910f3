"""The IAM policy providers/aws/README.md ships is derived from the calls the code makes: every
call the adapter and `spotwise doctor` make against moto is recorded (a botocore event hook,
providers/aws/fake_iam.py), mapped to its IAM action and resources (providers/aws/iam.py,
from the Service Authorization Reference) and evaluated against the shipped policy. moto
enforces no IAM, so without this a policy that cannot launch a Spot instance passed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest

from providers.aws import AwsProvider, AwsSettings
from providers.aws.fake_iam import IamFake, allowed
from providers.aws.iam import Need, needs
from providers.aws.settings import DEFAULT_AMI
from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    CapacityUnavailable,
    LaunchRequest,
    Market,
    NotPermitted,
    ResourceKind,
    ResourceRef,
)
from tests.support.aws_fixtures import REGION, eventbridge_warning, offering, spot_price

README = Path("providers/aws/README.md")
FIXTURES = Path(__file__).parent / "fixtures"
OWNER = "spotwise"  # the owner the shipped policy names
SSM_NAME = DEFAULT_AMI.removeprefix("resolve:ssm:")


def shipped_policy() -> dict[str, Any]:
    """The policy the README ships: a JSON file it links to, else its own JSON block."""
    text = README.read_text()
    linked = re.search(r"\]\((iam-policy[\w.-]*\.json)\)", text)
    if linked:
        return json.loads((README.parent / linked.group(1)).read_text())
    block = re.search(r"## Minimum IAM policy.*?```json\n(.*?)```", text, re.S)
    assert block, "the README ships no IAM policy"
    return json.loads(block.group(1))


def _request(token: str, **changes: Any) -> LaunchRequest:
    fields: dict[str, Any] = {
        "token": token,
        "offering": offering(),
        "command": ["python", "-m", "trainer"],
        "env": {"SPOTWISE_JOB_ID": "j", "SPOTWISE_ATTEMPT": "1",
                "SPOTWISE_CHECKPOINT_URI": "s3://bucket/j"},
        "tags": {TAG_JOB: "j", TAG_ATTEMPT: token, TAG_OWNER: OWNER},
    }  # fmt: skip
    fields.update(changes)
    return LaunchRequest(**fields)


@pytest.fixture
def world(moto: str, pricing: Any, session: boto3.Session, clock: Any, placement_groups: Any):
    """A provider on moto with the IAM fake on its session, the default `resolve:ssm:` AMI,
    an instance profile and an interruption queue: every kind of call it makes."""

    def make(policy: dict[str, Any]) -> tuple[AwsProvider, IamFake]:
        fake = IamFake(policy).install(session)
        fake.ssm_parameters[SSM_NAME] = "ami-0123456789abcdef0"

        def prices(parsed: dict[str, Any], **_: Any) -> None:
            for row in parsed.get("SpotPriceHistory", []):
                row["SpotPrice"] = f"{spot_price(row['InstanceType'], row['AvailabilityZone'])}"

        session.events.register("after-call.ec2.DescribeSpotPriceHistory", prices)
        iam = boto3.client("iam", region_name=REGION, endpoint_url=moto)
        iam.create_instance_profile(InstanceProfileName="spotwise-node")  # moto checks it
        sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto)
        queue = sqs.create_queue(QueueName="spotwise-interruptions")["QueueUrl"]
        settings = AwsSettings.model_validate({
            "regions": [REGION], "endpoint_url": moto, "pricing_endpoint_url": pricing.url,
            "sqs_endpoint_url": moto, "ssm_endpoint_url": moto, "sts_endpoint_url": moto,
            "sqs_queue_url": queue, "instance_profile": "spotwise-node",
            "instance_types": ["g5.xlarge", "g4dn.xlarge"], "max_attempts": 2,
        })  # fmt: skip
        provider = AwsProvider(settings, owner=OWNER, session=session, clock=clock)
        return provider, fake

    return make


def _everything(provider: AwsProvider, moto: str) -> None:
    """Every call the adapter makes: offerings, Spot, on-demand and gang launches, describe
    with a queued warning, listing, adoption, the doctor, and deleting what is left."""
    assert provider.offerings()
    (spot,) = provider.launch(_request("spot"))
    provider.launch(_request("od", offering=offering(market=Market.ON_DEMAND)))
    gang = provider.launch(_request("gang", count=2, placement_group="spotwise-j-a1"))
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto)
    url = sqs.get_queue_url(QueueName="spotwise-interruptions")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=eventbridge_warning(spot.id, provider._api.now()))
    provider.describe([spot.ref, *[g.ref for g in gang]])
    provider.find_by_token("spot", REGION)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto)
    loose = ec2.create_volume(
        AvailabilityZone="us-east-1b", Size=8,
        TagSpecifications=[{"ResourceType": "volume",
                            "Tags": [{"Key": TAG_OWNER, "Value": OWNER}]}],
    )["VolumeId"]  # fmt: skip
    listed = provider.list_tagged(OWNER)
    assert any(t.ref.id == loose for t in listed)
    provider.preflight()
    provider.terminate(
        [t.ref for t in listed if t.ref.kind is ResourceKind.INSTANCE]
        + [ResourceRef(loose, REGION, kind=ResourceKind.DISK),
           ResourceRef("spotwise-j-a1", REGION, kind=ResourceKind.PLACEMENT_GROUP)]
    )  # fmt: skip


@pytest.mark.slow
def test_the_shipped_policy_grants_every_call_the_adapter_makes(world, moto) -> None:
    provider, fake = world(shipped_policy())
    _everything(provider, moto)
    assert fake.denied == []
    made = fake.operations()
    # The scenario reached every kind of call the policy must cover.
    for op in [("ec2", "RunInstances"), ("ec2", "CreatePlacementGroup"), ("ec2", "CreateTags"),
               ("ec2", "TerminateInstances"), ("ec2", "DeleteVolume"),
               ("ec2", "DeletePlacementGroup"), ("ssm", "GetParameters"),
               ("sqs", "ReceiveMessage"), ("sqs", "DeleteMessageBatch"),
               ("sqs", "GetQueueAttributes"), ("pricing", "GetProducts"),
               ("sts", "GetCallerIdentity")]:  # fmt: skip
        assert op in made, op
    actions = {n.action for n in fake.needs}
    assert {"ec2:RunInstances", "ssm:GetParameters", "iam:PassRole"} <= actions
    spot_requests = [n for n in fake.needs if n.resource_type == "spot-instances-request"]
    assert spot_requests and all(allowed(fake.policy, n) for n in spot_requests)


@pytest.mark.slow
def test_the_old_policy_cannot_launch_spot_and_the_denial_marks_no_pool(world) -> None:
    before = json.loads((FIXTURES / "iam-policy-before.json").read_text())["policy"]
    provider, fake = world(before)
    with pytest.raises(NotPermitted) as got:
        provider.launch(_request("spot"))
    err = got.value
    assert not isinstance(err, CapacityUnavailable)  # no pool is out of capacity
    assert "ec2:RunInstances on arn:aws:ec2:us-east-1:123456789012:spot-instances-request/*" in (
        err.permission
    )
    assert "providers/aws/iam-policy.json" in str(err)
    refused = {(n.action, n.resource_type) for n in fake.denied}
    assert ("ec2:RunInstances", "spot-instances-request") in refused


def test_every_need_of_a_spot_gang_launch_from_the_reference() -> None:
    params = {
        "ImageId": DEFAULT_AMI, "InstanceType": "p5.48xlarge", "MinCount": 2, "MaxCount": 2,
        "Placement": {"AvailabilityZone": "us-east-1a", "GroupName": "g1"},
        "InstanceMarketOptions": {"MarketType": "spot"},
        "IamInstanceProfile": {"Name": "spotwise-node"}, "KeyName": "ops",
        "TagSpecifications": [{"ResourceType": "instance",
                               "Tags": [{"Key": TAG_OWNER, "Value": OWNER}]}],
    }  # fmt: skip
    got = needs("ec2", "RunInstances", params, region=REGION, account="123456789012")
    kinds = {(n.action, n.resource_type) for n in got}
    for kind in ("instance", "volume", "network-interface", "security-group", "subnet",
                 "image", "key-pair", "placement-group", "spot-instances-request"):  # fmt: skip
        assert ("ec2:RunInstances", kind) in kinds, kind
    assert ("ec2:CreateTags", "instance") in kinds  # tag on create
    assert ("ssm:GetParameters", "parameter") in kinds  # resolve:ssm: is read as the caller
    assert ("iam:PassRole", "role") in kinds
    with pytest.raises(KeyError):  # a call the table does not know cannot ship unnoticed
        needs("ec2", "ModifyInstanceAttribute", {}, region=REGION, account="1")


def test_the_evaluator_follows_iam_semantics() -> None:
    policy = {"Statement": [
        {"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "arn:aws:ec2:*:*:instance/*",
         "Condition": {"StringEquals": {"aws:RequestTag/spotwise-owner": "spotwise"}}},
        {"Effect": "Deny", "Action": "ec2:*", "Resource": "*",
         "Condition": {"StringEquals": {"aws:RequestTag/spotwise-owner": "evil"}}},
    ]}  # fmt: skip
    arn = "arn:aws:ec2:us-east-1:1:instance/*"
    assert allowed(
        policy, Need("ec2:RunInstances", arn, {"aws:RequestTag/spotwise-owner": "spotwise"})
    )
    assert not allowed(policy, Need("ec2:RunInstances", arn, {}))  # a missing key fails
    assert not allowed(policy, Need("ec2:RunInstances", "*", {}))  # no resource "*" granted
    evil = {"aws:RequestTag/spotwise-owner": "evil"}
    assert not allowed(policy, Need("ec2:RunInstances", arn, evil))  # an explicit deny wins
