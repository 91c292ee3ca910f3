"""Placement is a pure function: same inputs, same decision, with a reason when none fits."""

from __future__ import annotations

from datetime import timedelta

from providers.base import Market
from scheduler.core.catalog import Catalog
from scheduler.core.jobspec import SpotPreference, parse_gpu
from scheduler.core.placement import PlacementContext, Requirements, place
from tests.support.fakes import NOW, offering

CAT = Catalog(
    [
        offering("us-east-1a", "p4d.24xlarge", "A100", 8, 12.0, mem=40),
        offering("us-east-1b", "p4d.24xlarge", "A100", 8, 11.0, mem=40),
        offering("us-east-1a", "p4d.24xlarge", "A100", 8, 32.8, Market.ON_DEMAND, mem=40),
        offering("us-central1-a", "a2-ultragpu-8g", "A100", 8, 15.0, cloud="gcp", mem=80),
        offering("us-east-1a", "p5.48xlarge", "H100", 8, 30.0, mem=80),
        offering("us-east-1a", "g4dn.xlarge", "T4", 1, 0.2, mem=16),
        offering("us-east-1a", "g4dn.xlarge", "T4", 1, 0.53, Market.ON_DEMAND, mem=16),
    ]
)


def req(*gpus: str, **kw) -> Requirements:
    return Requirements(gpus=tuple(parse_gpu(g) for g in gpus), **kw)


def ctx(**kw) -> PlacementContext:
    return PlacementContext(now=NOW, **kw)


def test_cheapest_adequate():
    d = place(req("A100:8"), CAT, ctx())
    assert d.offering.zone == "us-east-1b" and d.offering.price_per_hour == 11.0
    assert d.candidates == 4


def test_memory_floor_and_alternatives():
    d = place(req("A100-80GB:8", "H100:8"), CAT, ctx())
    assert d.offering.instance_type == "a2-ultragpu-8g"
    d = place(req("any:8", "any:1"), CAT, ctx())
    assert d.offering.instance_type == "g4dn.xlarge"


def test_any_gpu_with_80gb():
    d = place(Requirements(gpus=(parse_gpu("any-80GB:8"),)), CAT, ctx())
    assert d.offering.gpu_memory_gb >= 80 and d.offering.price_per_hour == 15.0


def test_reasons():
    assert place(
        req("A100:8", max_price_per_hour=5, clouds=frozenset({"aws", "gcp"})), CAT, ctx()
    ).reason == ("no offering with 8x A100 under $5/h in aws,gcp (cheapest is $11.00/h)")
    assert place(req("B200:8"), CAT, ctx()).reason == "no offering with 8x B200"
    d = place(req("H100:8", spot=SpotPreference.NEVER), CAT, ctx())
    assert d.reason == "no on-demand offering with 8x H100"


def test_spot_preference():
    assert (
        place(req("T4:1", spot=SpotPreference.NEVER), CAT, ctx()).offering.market
        is Market.ON_DEMAND
    )
    assert place(req("T4:1", spot=SpotPreference.ONLY), CAT, ctx()).offering.market is Market.SPOT


def test_unavailable_ttl_and_avoid():
    pool_b = "aws/us-east-1b/p4d.24xlarge/spot"
    d = place(req("A100:8"), CAT, ctx(unavailable={pool_b: NOW + timedelta(minutes=5)}))
    assert d.offering.zone == "us-east-1a"
    # An expired mark no longer counts.
    d = place(req("A100:8"), CAT, ctx(unavailable={pool_b: NOW - timedelta(seconds=1)}))
    assert d.offering.zone == "us-east-1b"
    d = place(req("A100:8"), CAT, ctx(avoid_pools=frozenset({pool_b})))
    assert d.offering.zone == "us-east-1a"


def test_expected_cost_prefers_reliable_pool():
    # 1b is cheaper per hour but interrupted often; with 100 GPU-hours left, 1a wins.
    rates = {"aws/us-east-1b/p4d.24xlarge/spot": 2.0, "aws/us-east-1a/p4d.24xlarge/spot": 0.01}
    d = place(
        req("A100:8"),
        CAT,
        ctx(interruption_rate=rates, restart_overhead_hours=0.1, lost_work_hours=0.1),
    )
    assert d.offering.zone == "us-east-1a"


def test_budget_headroom():
    d = place(req("A100:8"), CAT, ctx(max_affordable_price=5.0, budget_name="team"))
    assert d.offering is None and "budget 'team'" in d.reason
    d = place(req("A100:8", "T4:1"), CAT, ctx(max_affordable_price=5.0, budget_name="team"))
    assert d.offering.instance_type == "g4dn.xlarge"


def test_policy_market_restriction():
    d = place(req("T4:1"), CAT, ctx(markets=frozenset({Market.ON_DEMAND})))
    assert d.offering.market is Market.ON_DEMAND


def test_offering_for_pool():
    o = CAT.offering_for_pool("aws/us-east-1b/p4d.24xlarge/spot")
    assert o is not None and o.price_per_hour == 11.0
    assert CAT.offering_for_pool("aws/nowhere/x/spot") is None
