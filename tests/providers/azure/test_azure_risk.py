"""Spot placement scores: one generate call per (location, size), through the SDK client's
own pipeline, scores per zone mapped to our zone names, cached for RISK_REFRESH; a score that
is not High, Medium or Low, or a throttled call, leaves the pool unscored. Eviction-rate
bands: one Resource Graph query for every location and size (fixtures/
resource_graph_spot_eviction.json), its band given to every zone of its location, cached
for EVICTION_REFRESH; a throttled or refused query leaves the pools on their scores and is
asked again after the TTL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import providers.azure
from providers.azure import AzureProvider
from providers.azure.risk import band_percent, eviction_bands, eviction_query
from providers.azure.ttl import EVICTION_REFRESH
from providers.base import Market, RiskKind
from tests.support.azure_harness import settings_for

pytestmark = pytest.mark.timeout(60)


def test_scores_per_zone_for_each_size(provider, arm) -> None:
    size = "Standard_NC4as_T4_v3"
    arm.spot_scores[("eastus", size, "1")] = "High"
    arm.spot_scores[("eastus", size, "2")] = "DataNotFoundOrStale"
    offers = [o for o in provider.offerings() if o.instance_type == size and o.region == "eastus"]
    before = len(arm.score_calls)  # the fake may be shared with other tests
    got = {s.pool: s for s in provider.risk_signals(offers)}
    bodies = arm.score_calls[before:]  # one call (azure-core may resend it on a dropped link)
    assert bodies and all(b == bodies[0] for b in bodies)
    assert bodies[0] == {
        "desiredLocations": ["eastus"], "desiredSizes": [{"sku": size}], "desiredCount": 1,
        "availabilityZones": True,
    }  # fmt: skip
    one = next(o for o in offers if o.zone == "eastus-1" and o.market is Market.SPOT)
    assert set(got) == {one.pool}
    assert got[one.pool].kind is RiskKind.AZURE_PLACEMENT_SCORE
    assert got[one.pool].detail == "High"
    asked = len(arm.score_calls)
    provider.risk_signals(offers)
    assert len(arm.score_calls) == asked  # cached


def test_a_throttled_call_leaves_the_pools_unscored(provider, arm) -> None:
    arm.fail_scores = True
    try:
        offers = [o for o in provider.offerings() if o.instance_type == "Standard_NC4as_T4_v3"]
        assert provider.risk_signals(offers) == []
        assert any("spot placement scores" in e.message for e in provider.drain_events())
    finally:
        arm.fail_scores = False


# -- eviction-rate bands ------------------------------------------------------------------

GRAPH = json.loads(
    (
        Path(providers.azure.__file__).parent / "fixtures" / "resource_graph_spot_eviction.json"
    ).read_text()
)


class _Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 12, 5, 12, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t


def test_the_published_answer_reads_as_bands_per_location_and_size() -> None:
    bands = eviction_bands(GRAPH["response"]["body"]["data"])
    assert bands == {
        ("eastus", "standard_nc4as_t4_v3"): "5-10",
        ("westus2", "standard_nc4as_t4_v3"): "20+",
        ("eastus", "standard_nc8as_t4_v3"): "0-5",
    }
    assert [band_percent(b) for b in ("0-5", "5-10", "10-15", "15-20", "20+")] == [
        2.5, 7.5, 12.5, 17.5, 25.0
    ]  # fmt: skip
    assert band_percent("5-10%") == 7.5 and band_percent("High") is None
    assert eviction_bands([{"skuName": "x", "location": "y", "evictionRate": "n/a"}]) == {}
    pairs = [(loc, size) for loc in ("eastus", "westus2")
             for size in ("Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3")]  # fmt: skip
    assert eviction_query(pairs) == GRAPH["request"]["body"]["query"]
    assert eviction_query([("eastus", "x'); drop")]) == ""  # never quoted into the query


def test_one_query_gives_every_zone_its_locations_band(provider, arm) -> None:
    for row in GRAPH["response"]["body"]["data"]:
        arm.graph.bands[(row["location"], row["skuName"])] = row["evictionRate"]
    sizes = {"Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3"}
    offers = [o for o in provider.offerings() if o.instance_type in sizes]
    got = {
        s.pool: s for s in provider.risk_signals(offers) if s.kind is RiskKind.AZURE_EVICTION_RATE
    }
    assert arm.graph.calls == [GRAPH["request"]["body"]]  # one query, the published shape
    spot = [o for o in offers if o.market is Market.SPOT]
    want = {
        ("eastus", "Standard_NC4as_T4_v3"): (7.5, "5-10"),
        ("westus2", "Standard_NC4as_T4_v3"): (25.0, "20+"),
        ("eastus", "Standard_NC8as_T4_v3"): (2.5, "0-5"),
    }
    for o in spot:
        hit = want.get((o.region, o.instance_type))
        if hit is None:  # westus2's NC8as: Azure gave no row
            assert o.pool not in got
        else:
            assert (got[o.pool].value, got[o.pool].detail) == hit
    zones = {o.zone for o in spot if (o.region, o.instance_type) in want}
    assert len(zones) > 2  # each location's zones all took its band
    provider.risk_signals(offers)
    assert len(arm.graph.calls) == 1  # cached


def test_pages_are_followed(provider, arm) -> None:
    for row in GRAPH["response"]["body"]["data"]:
        arm.graph.bands[(row["location"], row["skuName"])] = row["evictionRate"]
    arm.graph.page_rows = 2
    offers = [o for o in provider.offerings() if o.instance_type.endswith("_T4_v3")]
    got = [s for s in provider.risk_signals(offers) if s.kind is RiskKind.AZURE_EVICTION_RATE]
    assert len(arm.graph.calls) == 2 and arm.graph.calls[1]["options"]["$skipToken"] == "2"
    assert {s.detail for s in got} == {"5-10", "20+", "0-5"}


@pytest.mark.parametrize(
    ("status", "code"), [(429, "RateLimiting"), (403, "AuthorizationFailed"), (400, "BadRequest")]
)
def test_a_refused_query_keeps_the_scores_and_is_asked_again_after_the_ttl(
    arm, prices, rg, status, code
) -> None:
    clock = _Clock()
    provider = AzureProvider(settings_for(arm, prices, rg), owner="az-test", clock=clock)
    size = "Standard_NC4as_T4_v3"
    arm.spot_scores[("eastus", size, "1")] = "Medium"
    arm.graph.fail = (status, code)
    try:
        offers = [o for o in provider.offerings() if o.instance_type == size]
        sigs = provider.risk_signals(offers)  # never raises
        assert {s.kind for s in sigs} == {RiskKind.AZURE_PLACEMENT_SCORE}
        said = [e.message for e in provider.drain_events() if "eviction rates" in e.message]
        assert len(said) == 1 and code in said[0]
        clock.t += EVICTION_REFRESH / 2
        provider.risk_signals(offers)
        assert len(arm.graph.calls) == 1  # not hammered
        arm.graph.fail = None
        arm.graph.bands[("eastus", size.lower())] = "10-15"
        clock.t += EVICTION_REFRESH
        sigs = provider.risk_signals(offers)
        assert len(arm.graph.calls) == 2
        assert {s.detail for s in sigs if s.kind is RiskKind.AZURE_EVICTION_RATE} == {"10-15"}
    finally:
        arm.spot_scores.clear()
