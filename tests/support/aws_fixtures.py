"""Fixtures: one moto server for this package (reset per test), a fake Pricing API, hook helpers.

Everything talks HTTP on 127.0.0.1 through the real boto3; failures are injected with
botocore event hooks registered on the boto3.Session handed to the provider.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from providers.aws import AwsProvider, AwsSettings
from providers.aws.fake_pricing import FakePricing
from providers.aws.parse import region_of_zone
from providers.base import LaunchRequest, Market, Offering, ResourceRef
from tests.support.aws_harness import moto_server_url

SECRET = "tEsTsEcReT-must-never-be-printed-9f8e7d6c5b4a"
ACCESS_KEY = "AKIAEXAMPLEKEYID0001"
REGION = "us-east-1"

# Real-looking on-demand prices (us-east-1 list prices) for the Pricing fake.
ON_DEMAND = {
    "g4dn.xlarge": 0.526,
    "g4dn.12xlarge": 3.912,
    "g5.xlarge": 1.006,
    "g5.12xlarge": 5.672,
    "g6.xlarge": 0.8048,
    "p4d.24xlarge": 21.957642,
    "p5.48xlarge": 55.04,
}


def spot_price(instance_type: str, zone: str) -> float:
    """A deterministic, zone-dependent spot price: about a third of on-demand."""
    base = ON_DEMAND.get(instance_type, 2.0)
    return round(base * (0.30 + 0.02 * (ord(zone[-1]) - ord("a"))), 5)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def ec2_error(code: str, status: int = 400, message: str = "injected") -> AWSResponse:
    """An EC2 (query protocol) error response, as the wire would carry it (before-send)."""
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        "</Errors><RequestID>req-1</RequestID></Response>"
    ).encode()
    return AWSResponse("http://127.0.0.1/", status, {}, _Raw(body))


def fail_times(session: boto3.Session, operation: str, code: str, times: int, status: int = 503):
    """Make the next `times` HTTP attempts of `operation` fail; returns a call counter.

    `before-send` fires per attempt (inside botocore's retry loop), so retries are exercised.
    """
    calls = {"n": 0, "failed": 0}

    def hook(**_: Any) -> AWSResponse | None:
        calls["n"] += 1
        if calls["failed"] < times:
            calls["failed"] += 1
            return ec2_error(code, status)
        return None

    session.events.register(f"before-send.ec2.{operation}", hook)
    return calls


def inject_spot_prices(session: boto3.Session, extra_rows: list[dict[str, Any]] | None = None):
    """moto prices every spot offer at 0.00001: replace them with real-looking ones."""

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        for row in parsed.get("SpotPriceHistory", []):
            row["SpotPrice"] = f"{spot_price(row['InstanceType'], row['AvailabilityZone']):.5f}"
            row["Timestamp"] = datetime.now(UTC) - timedelta(minutes=3)
        parsed.setdefault("SpotPriceHistory", []).extend(extra_rows or [])

    session.events.register("after-call.ec2.DescribeSpotPriceHistory", hook)


def count_calls(session: boto3.Session, pattern: str = "before-call.ec2") -> list[str]:
    seen: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        seen.append(model.name)

    session.events.register(pattern, hook)
    return seen


class TestClock:
    __test__ = False

    def __init__(self) -> None:
        self.t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture(scope="package")
def aws_env() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    mp.setenv("AWS_DEFAULT_REGION", REGION)
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_RETRY_MODE"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="package")
def moto_url(aws_env: None) -> Iterator[str]:
    # One server per process, shared with the conformance harness (stopped at exit).
    yield moto_server_url()


@pytest.fixture(scope="package")
def pricing_server() -> Iterator[FakePricing]:
    fake = FakePricing().start()
    yield fake
    fake.stop()


@pytest.fixture
def moto(moto_url: str) -> str:
    req = urllib.request.Request(f"{moto_url}/moto-api/reset", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    return moto_url


@pytest.fixture
def pricing(pricing_server: FakePricing) -> FakePricing:
    pricing_server.reset()
    for itype, usd in ON_DEMAND.items():
        pricing_server.prices[(REGION, itype)] = usd
        pricing_server.prices[("us-west-2", itype)] = usd
    return pricing_server


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore backs off up to seconds between retries; the count matters here, not the wait."""
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0.0)


@pytest.fixture
def clock() -> TestClock:
    return TestClock()


@pytest.fixture(scope="package")
def _loader() -> Any:
    import botocore.loaders

    return botocore.loaders.create_loader()


@pytest.fixture
def session(aws_env: None, _loader: Any) -> boto3.Session:
    """A fresh session (own hooks, own clients) sharing parsed service models across tests."""
    import botocore.session

    core = botocore.session.Session()
    core.register_component("data_loader", _loader)
    return boto3.Session(botocore_session=core, region_name=REGION)


@pytest.fixture
def make_provider(
    moto: str, pricing: FakePricing, session: boto3.Session, clock: TestClock
) -> Callable[..., AwsProvider]:
    def make(*, prices: bool = True, session_: boto3.Session | None = None, **overrides: Any):
        sess = session_ or session
        if prices:
            inject_spot_prices(sess)
        fields: dict[str, Any] = {
            "regions": [REGION],
            "endpoint_url": moto,
            "pricing_endpoint_url": pricing.url,
            "ami": "ami-0123456789abcdef0",
            "max_attempts": 3,
            "connect_timeout": "2s",
            "read_timeout": "10s",
        }
        fields.update(overrides)
        return AwsProvider(
            AwsSettings.model_validate(fields), owner="tests", session=sess, clock=clock
        )

    return make


def offering(
    instance_type: str = "g5.xlarge",
    zone: str = "us-east-1b",
    market: Market = Market.SPOT,
    price: float = 0.33,
) -> Offering:
    return Offering(
        cloud="aws",
        region=region_of_zone(zone),
        zone=zone,
        instance_type=instance_type,
        gpu_model="A10G",
        gpu_count=1,
        gpu_memory_gb=24.0,
        vcpus=4,
        memory_gb=16,
        market=market,
        price_per_hour=price,
        seen_at=datetime(2026, 11, 29, 12, tzinfo=UTC),
    )


def launch_request(
    token: str = "job-1.attempt-1",
    offer: Offering | None = None,
    command: list[str] | None = None,
    owner: str = "tests",
    **changes: Any,
) -> LaunchRequest:
    return LaunchRequest(
        token=token,
        offering=offer or offering(),
        command=command or ["python", "-m", "trainer.train", "--steps", "100"],
        env={
            "SPOTWISE_JOB_ID": "job-1",
            "SPOTWISE_ATTEMPT": "1",
            "SPOTWISE_CHECKPOINT_URI": "s3://bucket/ckpt/job-1",
        },
        tags={"spotwise-job": "job-1", "spotwise-attempt": token, "spotwise-owner": owner},
        **changes,
    )


def ref(instance_id: str, region: str = REGION) -> ResourceRef:
    return ResourceRef(instance_id, region)


def moto_instance(instance_id: str, region: str = REGION) -> Any:
    """The moto backend object, for what EC2 does on its own (interruptions, shutdowns)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return ec2_backends[DEFAULT_ACCOUNT_ID][region].get_instance(instance_id)


def ec2_client(moto_url: str, region: str = REGION) -> Any:
    return boto3.client("ec2", region_name=region, endpoint_url=moto_url)


def user_data(moto_url: str, instance_id: str) -> str:
    import base64

    attr = ec2_client(moto_url).describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )
    return base64.b64decode(attr["UserData"]["Value"]).decode()


def eventbridge_rebalance(instance_id: str, when: datetime) -> str:
    """The "EC2 Instance Rebalance Recommendation" event, shaped as the EC2 User Guide's
    example ("EC2 instance rebalance recommendations", EventBridge): detail has the
    instance id only."""
    return json.dumps(
        {
            "version": "0",
            "id": "12345678-1234-1234-1234-123456789012",
            "detail-type": "EC2 Instance Rebalance Recommendation",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}b:instance/{instance_id}"],
            "detail": {"instance-id": instance_id},
        }
    )


def eventbridge_warning(instance_id: str, when: datetime) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "7c6d4f52-0000-0000-0000-000000000000",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}b:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


@pytest.fixture
def placement_groups(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """moto has no placement groups: answer CreatePlacementGroup (recording it) and record
    the GroupName each RunInstances asked for, on moto's side of the HTTP call."""
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses.instances import InstanceResponse

    seen: dict[str, list] = {"created": [], "run": []}
    original = InstanceResponse.run_instances

    def create(self: Any) -> str:
        seen["created"].append((self._get_param("GroupName"), self._get_param("Strategy")))
        return "<CreatePlacementGroupResponse><return>true</return></CreatePlacementGroupResponse>"

    def describe(self: Any) -> str:
        return (
            "<DescribePlacementGroupsResponse><placementGroupSet/>"
            "</DescribePlacementGroupsResponse>"
        )

    def delete(self: Any) -> str:
        seen.setdefault("deleted", []).append(self._get_param("GroupName"))
        return "<DeletePlacementGroupResponse><return>true</return></DeletePlacementGroupResponse>"

    def run(self: Any) -> Any:
        seen["run"].append(
            (self._get_param("Placement.GroupName"), int(self._get_param("MinCount")))
        )
        return original(self)

    monkeypatch.setattr(EC2Response, "create_placement_group", create, raising=False)
    monkeypatch.setattr(EC2Response, "describe_placement_groups", describe, raising=False)
    monkeypatch.setattr(EC2Response, "delete_placement_group", delete, raising=False)
    monkeypatch.setattr(InstanceResponse, "run_instances", run)
    return seen


@pytest.fixture
def placement_scores(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """moto has no GetSpotPlacementScores: answer it on moto's side of the HTTP call, in the
    wire shape of botocore's EC2 model (service-2.json: GetSpotPlacementScoresResult
    spotPlacementScoreSet/item with region, availabilityZoneId, score), scoring the zone ids
    moto's DescribeAvailabilityZones gives. `scores` maps a zone id to its score; the calls
    are recorded (the instance types asked, in order)."""
    from moto.ec2.responses import EC2Response

    state: dict[str, Any] = {"scores": {}, "calls": [], "fail": False}

    def get_scores(self: Any) -> str:
        types = list(self._get_param("InstanceTypes") or [])
        state["calls"].append(types)
        if state["fail"]:
            raise RuntimeError("not reachable")  # moto answers 500
        items = "".join(
            f"<item><region>{self.region}</region><availabilityZoneId>{zid}</availabilityZoneId>"
            f"<score>{score}</score></item>"
            for zid, score in state["scores"].items()
        )
        return (
            '<GetSpotPlacementScoresResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>r-1</requestId><spotPlacementScoreSet>{items}</spotPlacementScoreSet>"
            "</GetSpotPlacementScoresResponse>"
        )

    monkeypatch.setattr(EC2Response, "get_spot_placement_scores", get_scores, raising=False)
    return state
