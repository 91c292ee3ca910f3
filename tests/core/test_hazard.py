"""The clouds' risk signals as priors: GCE's preemption history (a share of the stops, not a
rate) and Azure's eviction-rate band (a chance per hour) as rates, and which signal wins
where a pool has several: Azure's band over its placement score, GCE's estimated uptime over
its history, the history over having nothing."""

from __future__ import annotations

import math

import pytest

from providers.base import RiskKind, RiskSignal
from scheduler.core import hazard

POOL = "gcp/us-central1-b/g2-standard-4/spot"


def _rate(kind: RiskKind, value: float, detail: str = "") -> float | None:
    return hazard.prior_rate(RiskSignal(POOL, kind, value, detail))


def test_a_preemption_share_becomes_a_rate_against_a_day_of_owner_stops() -> None:
    h = RiskKind.GCP_PREEMPTION_HISTORY
    # Half of the stops were preemptions: preemption as frequent as the owners' own stops,
    # one a day.
    assert _rate(h, 0.5) == pytest.approx(1 / 24)
    assert _rate(h, 0.2) == pytest.approx(0.25 / 24)
    assert _rate(h, 0.9) == pytest.approx(9 / 24)
    assert _rate(h, 1.0) == pytest.approx(_rate(h, 0.95))  # held below "every stop"
    assert _rate(h, 0.0) == hazard.RATE_FLOOR  # no preemption seen is no promise of none
    rates = [_rate(h, p / 10) for p in range(11)]
    assert rates == sorted(rates)  # monotone
    assert _rate(h, 1.5) is None and _rate(h, -0.1) is None


def test_an_eviction_band_is_a_chance_per_hour() -> None:
    e = RiskKind.AZURE_EVICTION_RATE
    assert _rate(e, 2.5, "0-5") == pytest.approx(-math.log(0.975))
    assert _rate(e, 25.0, "20+") == pytest.approx(-math.log(0.75))
    assert _rate(e, 100.0) is None


def test_the_uptime_wins_over_the_history_and_the_history_over_nothing() -> None:
    uptime = RiskSignal(POOL, RiskKind.GCP_ESTIMATED_UPTIME, 10.0)
    history = RiskSignal(POOL, RiskKind.GCP_PREEMPTION_HISTORY, 0.2)
    got = hazard.priors([history, uptime])
    assert got[POOL] == (pytest.approx(math.log(2) / 10), "gcp uptime 10h")
    got = hazard.priors([history])
    assert got[POOL] == (pytest.approx(0.25 / 24), "gcp preempted 20%")


def test_the_eviction_band_wins_over_the_placement_score() -> None:
    pool = "azure/eastus-1/Standard_NC4as_T4_v3/spot"
    band = RiskSignal(pool, RiskKind.AZURE_EVICTION_RATE, 25.0, "20+")
    score = RiskSignal(pool, RiskKind.AZURE_PLACEMENT_SCORE, 0.0, "High")
    got = hazard.priors([score, band])
    assert got[pool] == (pytest.approx(-math.log(0.75)), "azure eviction 20+%")
