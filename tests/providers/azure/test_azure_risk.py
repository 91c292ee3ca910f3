"""Spot placement scores: one generate call per (location, size), through the SDK client's
own pipeline, scores per zone mapped to our zone names, cached for RISK_REFRESH; a score that
is not High, Medium or Low, or a throttled call, leaves the pool unscored."""

from __future__ import annotations

import pytest

from providers.base import Market, RiskKind

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
