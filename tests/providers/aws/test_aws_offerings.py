"""Offerings over moto's real GPU catalogue, with injected prices and a fake Pricing API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from providers.base import Market, Provider
from tests.support.aws_fixtures import (
    ON_DEMAND,
    REGION,
    count_calls,
    ec2_client,
    ec2_error,
    inject_spot_prices,
    spot_price,
)

pytestmark = pytest.mark.timeout(60)


def by_key(offers):
    return {(o.zone, o.instance_type, o.market): o for o in offers}


@pytest.mark.slow
def test_gpu_offerings_from_moto_catalogue(make_provider, moto, clock):
    # All NVIDIA families start with g or p; the filter spares moto serialising all 1,395 types
    # (11 s). Dropping non-GPU types is covered by the paging test.
    p = make_provider(instance_types=["g*", "p*"])
    assert isinstance(p, Provider)
    assert p.name == "aws"
    offers = p.offerings()
    assert offers
    keys = by_key(offers)
    ec2 = ec2_client(moto)
    zones = {
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["p4d.24xlarge"]}],
        )["InstanceTypeOfferings"]
    }
    p4d = [o for o in offers if o.instance_type == "p4d.24xlarge" and o.market is Market.SPOT]
    assert {o.zone for o in p4d} == zones
    o = p4d[0]
    assert (o.cloud, o.region, o.gpu_model, o.gpu_count) == ("aws", REGION, "A100", 8)
    assert o.gpu_memory_gb == 40.0 and o.vcpus == 96 and o.memory_gb == 1152
    assert o.price_per_hour == pytest.approx(spot_price("p4d.24xlarge", o.zone))
    assert o.seen_at == clock.now()
    assert o.pool == f"aws/{o.zone}/p4d.24xlarge/spot"
    # On-demand prices come from the Pricing API, not the snapshot.
    od = keys[(o.zone, "p4d.24xlarge", Market.ON_DEMAND)]
    assert od.price_per_hour == pytest.approx(ON_DEMAND["p4d.24xlarge"])
    # GPU memory as sold: A10G is reported as 22888 MiB = 24 GB; H100 80 GiB.
    g5 = next(o for o in offers if o.instance_type == "g5.xlarge")
    assert (g5.gpu_model, g5.gpu_count, g5.gpu_memory_gb) == ("A10G", 1, 24.0)
    h100 = next(o for o in offers if o.instance_type == "p5.48xlarge")
    assert (h100.gpu_model, h100.gpu_count, h100.gpu_memory_gb) == ("H100", 8, 80.0)
    models = {o.gpu_model for o in offers}
    assert {"T4", "A10G", "L4", "A100", "H100"} <= models
    # No CPU-only, no fractional-GPU (g6f) and no arm64 (g5g) types with an x86 AMI.
    assert all(o.gpu_count >= 1 and o.gpu_model for o in offers)
    assert not any(o.instance_type.startswith(("g6f.", "g5g.", "m5.")) for o in offers)
    # Types the Pricing API does not know and the snapshot lacks are offered as spot only.
    assert not any(
        o.instance_type == "p6-b200.48xlarge" and o.market is Market.ON_DEMAND for o in offers
    )


def test_allow_list_with_wildcards(make_provider):
    offers = make_provider(instance_types=["g5.*", "p4d.24xlarge"]).offerings()
    types = {o.instance_type for o in offers}
    assert "p4d.24xlarge" in types
    assert all(t.startswith("g5.") or t == "p4d.24xlarge" for t in types)
    assert {o.market for o in offers} == {Market.SPOT, Market.ON_DEMAND}


def test_only_linux_spot_rows_count_and_the_request_asks_for_linux(make_provider, session):
    # A cheaper Windows row and an older Linux row must not win.
    now = datetime.now(UTC)
    decoys = [
        {
            "AvailabilityZone": "us-east-1a",
            "InstanceType": "g5.xlarge",
            "ProductDescription": "Windows",
            "SpotPrice": "0.01",
            "Timestamp": now,
        },
        {
            "AvailabilityZone": "us-east-1a",
            "InstanceType": "g5.xlarge",
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": "9.99",
            "Timestamp": now - timedelta(days=2),
        },
    ]
    inject_spot_prices(session, decoys)
    sent: list[dict[str, Any]] = []
    session.events.register(
        "before-call.ec2.DescribeSpotPriceHistory",
        lambda params, **_: sent.append(params["body"]),
    )
    p = make_provider(prices=False, instance_types=["g5.xlarge"])
    spot = [o for o in p.offerings() if o.market is Market.SPOT and o.zone == "us-east-1a"]
    assert [o.price_per_hour for o in spot] == [
        pytest.approx(spot_price("g5.xlarge", "us-east-1a"))
    ]
    body = sent[0]
    assert body["ProductDescription.1"] == "Linux/UNIX (Amazon VPC)"
    assert body["ProductDescription.2"] == "Linux/UNIX"
    assert "StartTime" in body
    assert not any(v == "product-description" for v in body.values())


def _page(parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    return AWSResponse("http://127.0.0.1/", 200, {}, None), parsed


def test_paging_of_types_and_spot_prices(make_provider, session):
    """moto returns one page; real AWS pages both. Serve two pages each from a hook."""
    t_pages = {
        None: {
            "InstanceTypes": [
                {
                    "InstanceType": "g5.xlarge",
                    "VCpuInfo": {"DefaultVCpus": 4},
                    "MemoryInfo": {"SizeInMiB": 16384},
                    "GpuInfo": {
                        "Gpus": [{"Name": "A10G", "Count": 1, "MemoryInfo": {"SizeInMiB": 22888}}]
                    },
                    "SupportedUsageClasses": ["on-demand", "spot"],
                },
                {"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}},
            ],
            "NextToken": "t2",
        },
        "t2": {
            "InstanceTypes": [
                {
                    "InstanceType": "p4d.24xlarge",
                    "VCpuInfo": {"DefaultVCpus": 96},
                    "MemoryInfo": {"SizeInMiB": 1179648},
                    "GpuInfo": {
                        "Gpus": [{"Name": "A100", "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}]
                    },
                    "SupportedUsageClasses": ["on-demand", "spot"],
                }
            ]
        },
    }
    now = datetime.now(UTC)

    def row(zone: str, itype: str, price: str) -> dict[str, Any]:
        return {
            "AvailabilityZone": zone,
            "InstanceType": itype,
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": price,
            "Timestamp": now,
        }

    s_pages = {
        None: {"SpotPriceHistory": [row("us-east-1a", "g5.xlarge", "0.40")], "NextToken": "s2"},
        "s2": {"SpotPriceHistory": [row("us-east-1a", "p4d.24xlarge", "9.50")]},
    }
    tokens: list[Any] = []

    def serve(pages):
        def hook(params: dict[str, Any], **_: Any):
            token = params["body"].get("NextToken")
            tokens.append(token)
            return _page(pages[token])

        return hook

    session.events.register("before-call.ec2.DescribeInstanceTypes", serve(t_pages))
    session.events.register("before-call.ec2.DescribeSpotPriceHistory", serve(s_pages))
    p = make_provider(prices=False)
    spot = {
        (o.instance_type, o.zone): o.price_per_hour
        for o in p.offerings()
        if o.market is Market.SPOT
    }
    assert spot == {("g5.xlarge", "us-east-1a"): 0.40, ("p4d.24xlarge", "us-east-1a"): 9.50}
    assert tokens == [None, "t2", None, "s2"]


def test_cached_for_the_price_interval_and_list_prices_for_a_day(
    make_provider, session, clock, pricing
):
    calls = count_calls(session)
    p = make_provider(instance_types=["g5.xlarge", "p4d.24xlarge"], price_refresh="5m")
    first = p.offerings()
    n_ec2, n_pricing = len(calls), len(pricing.requests)
    assert n_pricing == 1  # one GetProducts for every type of the region (ANY_OF)
    assert p.offerings() == first and len(calls) == n_ec2  # cached: no call at all
    clock.advance(301)
    again = p.offerings()
    assert [c for c in calls[n_ec2:]] == ["DescribeSpotPriceHistory"]  # types/zones cached
    assert len(pricing.requests) == n_pricing  # list prices cached for a day
    assert again[0].seen_at == clock.now()
    clock.advance(86400)
    p.offerings()
    assert len(pricing.requests) == 2 * n_pricing
    assert p.drain_events() == []


def test_pricing_unreachable_falls_back_to_the_snapshot_and_says_so(make_provider, pricing, clock):
    p = make_provider(
        instance_types=["p4d.24xlarge", "g5.xlarge"],
        pricing_endpoint_url="http://127.0.0.1:9",  # nothing listens on the discard port
        max_attempts=1,
    )
    offers = p.offerings()
    od = {o.instance_type: o.price_per_hour for o in offers if o.market is Market.ON_DEMAND}
    assert od == {"p4d.24xlarge": 21.957642, "g5.xlarge": 1.006}  # data/ondemand_prices.csv
    events = p.drain_events()
    assert len(events) == 1 and "snapshot" in events[0].message
    assert "unreachable" in events[0].message
    assert p.drain_events() == []
    # Spot offerings do not depend on the Pricing API.
    assert any(o.market is Market.SPOT for o in offers)


def test_pricing_access_denied_falls_back_then_recovers(make_provider, pricing, clock):
    pricing.fail_with = "AccessDeniedException"
    p = make_provider(instance_types=["g5.xlarge"], price_refresh="1m")
    od = [o for o in p.offerings() if o.market is Market.ON_DEMAND]
    assert od and od[0].price_per_hour == 1.006
    assert any("AccessDeniedException" in e.message for e in p.drain_events())
    # The API is tried again at the next price refresh, not a day later.
    pricing.fail_with = None
    pricing.prices[(REGION, "g5.xlarge")] = 1.111
    clock.advance(61)
    od = [o for o in p.offerings() if o.market is Market.ON_DEMAND]
    assert od[0].price_per_hour == 1.111
    assert p.drain_events() == []


@pytest.mark.slow
def test_pricing_paged_and_licensed_products_ignored(make_provider, pricing):
    # The fake returns 2 products per type (one licensed decoy at a tenth of the price);
    # a page size of 1 would need paging; the adapter asks for 100 and must skip the decoy.
    p = make_provider(instance_types=["g4dn.xlarge"])
    od = [o for o in p.offerings() if o.market is Market.ON_DEMAND]
    assert {o.price_per_hour for o in od} == {0.526}
    assert set(pricing.page_size_seen) == {100}
    filters = {f["Field"]: f["Value"] for f in pricing.requests[0]["Filters"]}
    assert filters == {
        "instanceType": "g4dn.xlarge",
        "regionCode": REGION,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }


def test_subnets_restrict_zones(make_provider, moto):
    ec2 = ec2_client(moto)
    subnet = next(
        s for s in ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == "us-east-1b"
    )
    p = make_provider(instance_types=["g5.xlarge"], subnet_id=subnet["SubnetId"])
    assert {o.zone for o in p.offerings()} == {"us-east-1b"}


@pytest.mark.slow
def test_two_regions_and_one_failing_region_keeps_the_rest(make_provider, session, clock):
    west_down = {"on": False}

    def hook(request: Any, **_: Any) -> AWSResponse | None:
        # Both regions share the moto endpoint; the signing scope names the region.
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else auth
        if west_down["on"] and "/us-west-2/ec2/" in auth:
            return ec2_error("InternalError", 500)
        return None

    session.events.register("before-send.ec2.DescribeSpotPriceHistory", hook)
    p = make_provider(instance_types=["g5.xlarge"], regions=[REGION, "us-west-2"], max_attempts=1)
    first = p.offerings()
    assert {o.region for o in first} == {REGION, "us-west-2"}
    assert all(o.zone.startswith(o.region) for o in first)
    west = [o for o in first if o.region == "us-west-2"]
    # us-west-2 fails at the next refresh: its last offerings are kept, and an event says so.
    west_down["on"] = True
    clock.advance(301)
    again = p.offerings()
    assert [o for o in again if o.region == "us-west-2"] == west
    assert {o.seen_at for o in again if o.region == REGION} == {clock.now()}
    (event,) = p.drain_events()
    assert "us-west-2" in event.message and "InternalError" in event.message
    assert "keeping" in event.message and event.level == "warning"
    # A provider with nothing cached yet still returns the healthy region.
    fresh = make_provider(
        prices=False, instance_types=["g5.xlarge"], regions=[REGION, "us-west-2"], max_attempts=1
    )
    assert {o.region for o in fresh.offerings()} == {REGION}
    assert any("no offerings from us-west-2" in e.message for e in fresh.drain_events())


def test_a_region_error_without_cache_is_raised_typed(make_provider, session):
    from providers.base import FatalError
    from tests.support.aws_fixtures import fail_times

    fail_times(session, "DescribeInstanceTypes", "UnauthorizedOperation", 99, status=403)
    p = make_provider()
    with pytest.raises(FatalError, match="UnauthorizedOperation"):
        p.offerings()


@pytest.mark.slow
def test_local_zones_stay_apart_and_no_pool_is_listed_twice(make_provider, session):
    """A Local Zone is its own capacity pool in its parent region; duplicated rows from EC2
    (offerings or price history) never make duplicate offerings."""
    local = "us-east-1-atl-1a"

    def more_zones(parsed: dict[str, Any], **_: Any) -> None:
        rows = parsed.setdefault("InstanceTypeOfferings", [])
        extra = {
            "InstanceType": "g5.xlarge",
            "Location": local,
            "LocationType": "availability-zone",
        }
        rows.extend([extra, dict(extra), *[dict(r) for r in rows]])  # and every row twice

    session.events.register("after-call.ec2.DescribeInstanceTypeOfferings", more_zones)
    now = datetime.now(UTC)
    row = {"AvailabilityZone": local, "InstanceType": "g5.xlarge",
           "ProductDescription": "Linux/UNIX", "SpotPrice": "0.61", "Timestamp": now}  # fmt: skip
    inject_spot_prices(session, [row, dict(row)])
    offers = make_provider(prices=False, instance_types=["g5.xlarge"]).offerings()
    pools = [o.pool for o in offers]
    assert len(pools) == len(set(pools))
    assert len({(o.zone, o.instance_type, o.market) for o in offers}) == len(offers)
    lz = by_key(offers)[(local, "g5.xlarge", Market.SPOT)]
    assert lz.region == REGION and lz.price_per_hour == 0.61
    assert lz.pool == f"aws/{local}/g5.xlarge/spot"
    parent = by_key(offers)[("us-east-1a", "g5.xlarge", Market.SPOT)]
    assert parent.price_per_hour != lz.price_per_hour
    assert (local, "g5.xlarge", Market.ON_DEMAND) in by_key(offers)


def test_gpu_names_are_canonical_with_memory_variants(make_provider):
    """EC2 names both A100 parts "A100" and both V100 parts "V100": memory tells them apart."""
    offers = make_provider(instance_types=["p4d.24xlarge", "p4de.24xlarge", "p3dn.24xlarge",
                                           "g5.xlarge"]).offerings()  # fmt: skip
    seen = {o.instance_type: (o.gpu_model, o.gpu_memory_gb) for o in offers}
    assert seen["p4d.24xlarge"] == ("A100", 40.0)
    assert seen["p4de.24xlarge"] == ("A100", 80.0)
    assert seen["p3dn.24xlarge"] == ("V100", 32.0)
    assert seen["g5.xlarge"] == ("A10G", 24.0)
