"""Capacity advice: one advice.capacity call per (zone, shape) in compute_v1's request shape
(Spot, one VM, the zone as the only distribution zone, the machine type and its GPUs as the
only selection), the estimated uptime read as hours, cached for RISK_REFRESH; a refused call
leaves the pool unscored and says so."""

from __future__ import annotations

import pytest

from providers.base import Market, RiskKind
from providers.gcp import GcpProvider
from providers.gcp.fake import FakeGcp
from providers.gcp.risk import uptime_hours
from tests.support.gcp_harness import REGION, T4_SHAPE, ZONE, t4_offering

pytestmark = pytest.mark.timeout(60)


def test_estimated_uptime_per_zone_and_shape(provider: GcpProvider, fake: FakeGcp) -> None:
    fake.advice[(ZONE, "n1-standard-4")] = (0.8, "36000s")
    spot, other = t4_offering(), t4_offering(zone="us-central1-b")
    od = t4_offering(Market.ON_DEMAND)
    (sig,) = provider.risk_signals([spot, other, od])
    assert (sig.pool, sig.kind, sig.value) == (spot.pool, RiskKind.GCP_ESTIMATED_UPTIME, 10.0)
    assert len(fake.advice_calls) == 2  # both spot pools asked, on-demand never
    region, body = fake.advice_calls[0]
    assert region == REGION and body["size"] == 1
    assert body["instanceProperties"]["scheduling"]["provisioningModel"] == "SPOT"
    assert body["distributionPolicy"]["zones"] == [{"zone": f"zones/{ZONE}"}]
    (selection,) = body["instanceFlexibilityPolicy"]["instanceSelections"].values()
    assert selection["machineTypes"] == ["n1-standard-4"]
    assert selection["guestAccelerators"] == [
        {"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}
    ]
    assert T4_SHAPE.startswith("n1-standard-4")
    provider.risk_signals([spot, other])
    assert len(fake.advice_calls) == 2  # cached


def test_a_refused_advice_call_leaves_the_pool_unscored(provider: GcpProvider, fake: FakeGcp):
    fake.fail_advice = True
    assert provider.risk_signals([t4_offering()]) == []
    assert any("capacity advice" in e.message for e in provider.drain_events())


def test_uptime_text() -> None:
    assert uptime_hours("5400s") == 1.5
    assert uptime_hours("2h") == 2.0
    assert uptime_hours("3d") == 72.0
    assert uptime_hours("") is None and uptime_hours("soon") is None
