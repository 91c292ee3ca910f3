"""Capacity advice: one advice.capacity call per (zone, shape) in compute_v1's request shape
(Spot, one VM, the zone as the only distribution zone, the machine type and its GPUs as the
only selection), the estimated uptime read as hours, cached for RISK_REFRESH; a refused call
leaves the pool unscored and says so. Capacity history: one advice.capacityHistory call per
(zone, machine type) in the published shape (fixtures/capacity_history.json), the newest
week's preemption share, N1 shapes with attached GPUs never asked; a refusal (403, 404, 429)
leaves the pool on its other signals, is said once, and is retried after HISTORY_REFRESH."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.cloud import compute_v1

import providers.gcp
from providers.base import Market, Offering, RiskKind
from providers.gcp import GcpProvider
from providers.gcp.fake import FakeGcp
from providers.gcp.risk import preemption_share, uptime_hours
from providers.gcp.ttl import HISTORY_REFRESH
from tests.support.gcp_harness import REGION, T4_SHAPE, ZONE, settings, t4_offering

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


# -- capacity history ---------------------------------------------------------------------

HISTORY = json.loads(
    (Path(providers.gcp.__file__).parent / "fixtures" / "capacity_history.json").read_text()
)
G2 = "g2-standard-4"


def g2_offering(zone: str = "us-central1-b") -> Offering:
    return Offering(
        "gcp", REGION, zone, G2, "L4", 1, 24.0, 4, 16.0, Market.SPOT, 0.2843, datetime.now(UTC)
    )


class _Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 12, 5, 12, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t


def test_the_history_fixture_reads_as_the_newest_weeks_mean_share() -> None:
    resp = compute_v1.CapacityHistoryResponse.from_json(json.dumps(HISTORY["response"]))
    # eight days: the oldest (0.5) is past RECENT_DAYS = 7
    assert preemption_share(resp) == pytest.approx(1.35 / 7)
    assert preemption_share(compute_v1.CapacityHistoryResponse()) is None


def test_preemption_history_per_zone_and_machine_type(provider: GcpProvider, fake: FakeGcp):
    rates = [r["preemptionRate"] for r in HISTORY["response"]["preemptionHistory"]]
    fake.history[("us-central1-b", G2)] = rates
    g2, t4 = g2_offering(), t4_offering()
    got = [s for s in provider.risk_signals([g2, t4]) if s.kind is RiskKind.GCP_PREEMPTION_HISTORY]
    assert [(s.pool, s.value) for s in got] == [(g2.pool, pytest.approx(1.35 / 7))]
    # One call, in the published request shape; the N1 shape with a T4 is never asked.
    assert fake.history_calls == [(REGION, HISTORY["request"])]
    provider.risk_signals([g2, t4])
    assert len(fake.history_calls) == 1  # cached for HISTORY_REFRESH


@pytest.mark.parametrize(
    ("status", "reason"), [(403, "forbidden"), (404, "notFound"), (429, "rateLimitExceeded")]
)
def test_a_refused_history_call_keeps_the_other_signals_and_is_retried_after_the_ttl(
    fake: FakeGcp, status: int, reason: str
) -> None:
    clock = _Clock()
    provider = GcpProvider(settings(fake), owner="tests", clock=clock)
    fake.advice[("us-central1-b", G2)] = (0.7, "36000s")
    fake.fail_history = (status, reason)
    offers = [g2_offering("us-central1-b"), g2_offering("us-central1-c")]
    sigs = provider.risk_signals(offers)  # never raises
    assert [(s.pool, s.kind) for s in sigs] == [(offers[0].pool, RiskKind.GCP_ESTIMATED_UPTIME)]
    # The refusal covers the project (403, 429) or the region (404): one call, said once.
    assert len(fake.history_calls) == 1
    said = [e.message for e in provider.drain_events() if "capacity history" in e.message]
    assert len(said) == 1 and str(status) in said[0]
    clock.t += HISTORY_REFRESH / 2
    provider.risk_signals(offers)
    assert len(fake.history_calls) == 1  # not hammered
    fake.fail_history = None
    fake.history[("us-central1-c", G2)] = [0.2]
    clock.t += HISTORY_REFRESH
    sigs = provider.risk_signals(offers)
    assert (offers[1].pool, RiskKind.GCP_PREEMPTION_HISTORY) in {(s.pool, s.kind) for s in sigs}
    assert len(fake.history_calls) == 3
