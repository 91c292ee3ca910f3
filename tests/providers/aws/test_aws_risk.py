"""Spot placement scores: one call per region for its spot types together, zone ids resolved
to this account's zone names, cached for RISK_REFRESH, a failed call leaving the region
unscored (and said) rather than failing the price poll."""

from __future__ import annotations

from providers.aws.ttl import RISK_REFRESH
from providers.base import Market, RiskKind
from tests.support.aws_fixtures import REGION, ec2_client


def test_scores_per_zone_for_the_regions_spot_types_cached(
    make_provider, moto, clock, placement_scores
):
    zones = ec2_client(moto).describe_availability_zones()["AvailabilityZones"]
    first, second = zones[0], zones[1]
    placement_scores["scores"] = {first["ZoneId"]: 9, second["ZoneId"]: 2}
    p = make_provider(instance_types=["g5.xlarge", "p4d.24xlarge"])
    offers = p.offerings()
    got = p.risk_signals(offers)
    (types,) = placement_scores["calls"]  # one call, every spot type of the region at once
    assert sorted(types) == sorted({o.instance_type for o in offers if o.market is Market.SPOT})
    by_pool = {s.pool: s for s in got}
    spot = [o for o in offers if o.market is Market.SPOT]
    for o in spot:
        want = {first["ZoneName"]: 9.0, second["ZoneName"]: 2.0}.get(o.zone)
        sig = by_pool.get(o.pool)
        assert (sig.value if sig else None) == want
    assert all(s.kind is RiskKind.AWS_PLACEMENT_SCORE for s in got)
    assert not any(s.pool.endswith("/on-demand") for s in got)
    assert all(o.region == REGION for o in offers)
    p.risk_signals(offers)
    assert len(placement_scores["calls"]) == 1  # cached
    clock.advance(RISK_REFRESH.total_seconds() + 1)
    p.risk_signals(offers)
    assert len(placement_scores["calls"]) == 2


def test_a_failed_score_call_leaves_the_pools_unscored_and_says_so(
    make_provider, clock, placement_scores
):
    placement_scores["fail"] = True
    p = make_provider(instance_types=["g5.xlarge"])
    offers = p.offerings()
    assert p.risk_signals(offers) == []
    assert any("spot placement scores" in e.message for e in p.drain_events())
    p.risk_signals(offers)
    assert len(placement_scores["calls"]) == 1  # not retried before RISK_REFRESH
