"""AWS's answers read as AWS means them, pinned by AWS's own data: every StateReason code
the installed botocore's EC2 model documents, RunInstances errors as EC2 sends them
(fixtures/run_instances_errors.json, each with its source), a real ICE 500 body through the
real client, one Price List query per region, and one interruption queue per region."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import botocore
import pytest
from botocore.exceptions import ClientError

from providers.aws.errors import translate
from providers.aws.parse import _REASONS, to_instance
from providers.base import (
    CapacityUnavailable,
    EndReason,
    FailureKind,
    InstanceState,
    LaunchRejected,
    NotPermitted,
    SettingRefused,
)
from tests.support.aws_fixtures import REGION, ec2_error, eventbridge_warning, launch_request

FIXTURES = Path(__file__).parent / "fixtures"
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def documented_state_reasons() -> list[str]:
    """Every code in StateReason.Message's documentation of the installed EC2 model."""
    data = Path(botocore.__file__).parent / "data" / "ec2"
    model = sorted(data.glob("*/service-2.json*"))[-1]
    opener = gzip.open if model.suffix == ".gz" else open
    with opener(model, "rt") as f:  # type: ignore[operator]
        doc = json.load(f)["shapes"]["StateReason"]["members"]["Message"]["documentation"]
    return re.findall(r"<code>((?:Server|Client)\.[\w.]+)</code>", doc)


# What each code means for the attempt (EC2 API Reference, StateReason; botocore's model).
EXPECTED = {
    "Server.InsufficientInstanceCapacity": (EndReason.LAUNCH_FAILED, FailureKind.CAPACITY),
    "Server.InternalError": (EndReason.LAUNCH_FAILED, None),
    "Server.ScheduledStop": (EndReason.INTERRUPTED, None),
    "Server.SpotInstanceShutdown": (EndReason.INTERRUPTED, None),
    "Server.SpotInstanceTermination": (EndReason.INTERRUPTED, None),
    "Client.InstanceInitiatedShutdown": (EndReason.EXITED, None),
    "Client.InstanceTerminated": (EndReason.TERMINATED, None),
    "Client.InternalError": (EndReason.LAUNCH_FAILED, FailureKind.SETUP),
    "Client.InvalidSnapshot.NotFound": (EndReason.LAUNCH_FAILED, FailureKind.SETUP),
    "Client.UserInitiatedHibernate": (EndReason.TERMINATED, None),
    "Client.UserInitiatedShutdown": (EndReason.TERMINATED, None),
    "Client.VolumeLimitExceeded": (EndReason.LAUNCH_FAILED, FailureKind.QUOTA),
}


def test_every_documented_state_reason_has_a_meaning() -> None:
    codes = documented_state_reasons()
    assert len(codes) >= 12
    assert sorted(codes) == sorted(EXPECTED), "botocore documents a code this table lacks"
    assert set(codes) <= set(_REASONS)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_state_reason(code: str) -> None:
    raw = {
        "InstanceId": "i-0123456789abcdef0", "InstanceType": "g5.xlarge",
        "Placement": {"AvailabilityZone": "us-east-1b"}, "InstanceLifecycle": "spot",
        "State": {"Name": "terminated"},
        "StateReason": {"Code": code, "Message": f"{code}: as documented"},
        "StateTransitionReason": "Server.SpotInstanceTermination (2026-11-29 11:58:00 GMT)",
    }  # fmt: skip
    inst = to_instance(raw, NOW)
    reason, kind = EXPECTED[code]
    assert inst.state is InstanceState.ENDED and inst.end_reason is reason
    assert (inst.failure.kind if inst.failure else None) is kind
    if inst.failure is not None:
        assert inst.failure.pool == "aws/us-east-1b/g5.xlarge/spot"
    # Capacity that never came is a launch that failed, never an interruption.
    if code == "Server.InsufficientInstanceCapacity":
        assert reason is not EndReason.INTERRUPTED


def _fixture_errors() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "run_instances_errors.json").read_text())["errors"]


@pytest.mark.parametrize("case", _fixture_errors(), ids=lambda c: f"{c['code']}-{c['blame']}")
def test_run_instances_errors_are_read_by_what_they_name(case: dict[str, Any]) -> None:
    exc = ClientError(
        {"Error": {"Code": case["code"], "Message": case["message"]},
         "ResponseMetadata": {"HTTPStatusCode": case["status"]}},
        "RunInstances",
    )  # fmt: skip
    pool = "aws/us-east-1b/g5.xlarge/spot"
    got = translate(exc, what="run_instances", pool=pool, request=True)
    blame = case["blame"]
    if blame == "pool":
        assert type(got) is CapacityUnavailable and got.pool == pool
    elif blame == "job":
        assert type(got) is LaunchRejected
    elif blame == "permission":
        assert type(got) is NotPermitted
        assert got.permission == (
            "ec2:RunInstances on arn:aws:ec2:us-east-1:123456789012:spot-instances-request/*"
        )
    else:
        assert type(got) is SettingRefused and got.key == f"[providers.aws] {blame}"
        assert got.key in str(got)


def test_a_real_insufficient_capacity_500_is_an_answer_not_retried(
    make_provider: Any, session: boto3.Session
) -> None:
    ice = next(e for e in _fixture_errors() if e["code"] == "InsufficientInstanceCapacity")
    calls = {"n": 0}

    def answer(**_: Any) -> Any:
        calls["n"] += 1
        return ec2_error(ice["code"], ice["status"], ice["message"])

    session.events.register("before-send.ec2.RunInstances", answer)
    provider = make_provider(prices=False, max_attempts=5)
    with pytest.raises(CapacityUnavailable) as got:
        provider.launch(launch_request())
    assert calls["n"] == 1  # botocore would retry a 500 four more times
    assert "us-west-2a, us-west-2c" in str(got.value)


def test_on_demand_prices_are_one_query_per_region(make_provider: Any, pricing: Any) -> None:
    provider = make_provider(instance_types=["g4dn.*", "g5.*", "g6.*", "p4d.*", "p5.*"])
    offers = provider.offerings()
    assert {o.instance_type for o in offers if o.market.value == "on-demand"} >= {
        "g5.xlarge", "p4d.24xlarge", "p5.48xlarge"
    }  # fmt: skip
    assert len(pricing.requests) == 1  # was one GetProducts per instance type (~65 a region)
    (filters,) = [r["Filters"] for r in pricing.requests]
    (any_of,) = [f for f in filters if f["Type"] == "ANY_OF"]
    assert any_of["Field"] == "instanceType" and "g5.xlarge" in any_of["Value"].split(",")


@pytest.mark.slow
def test_each_region_reads_its_own_interruption_queue(make_provider: Any, moto: str) -> None:
    urls = {}
    for region in ("us-east-1", "us-west-2"):
        sqs = boto3.client("sqs", region_name=region, endpoint_url=moto)
        urls[region] = sqs.create_queue(QueueName=f"spotwise-interruptions-{region}")["QueueUrl"]
    provider = make_provider(
        prices=False, regions=["us-east-1", "us-west-2"], sqs_queue_url=urls,
        sqs_endpoint_url=moto,
    )  # fmt: skip
    (east,) = provider.launch(launch_request(token="east"))
    when = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
    west = boto3.client("sqs", region_name="us-west-2", endpoint_url=moto)
    west.send_message(QueueUrl=urls["us-west-2"], MessageBody=eventbridge_warning(east.id, when))
    (seen,) = provider.describe([east.ref])
    assert seen.notice_at == when  # read from the second region's queue too
    assert provider.settings.queues() == urls


def test_a_queue_table_names_configured_regions_only() -> None:
    from pydantic import ValidationError

    from providers.aws import AwsSettings

    with pytest.raises(ValidationError, match="eu-west-1 is not one of the configured regions"):
        AwsSettings.model_validate(
            {"regions": [REGION], "sqs_queue_url": {"eu-west-1": "https://sqs.eu-west-1.x/1/q"}}
        )
