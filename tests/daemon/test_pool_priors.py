"""The clouds' risk data as each pool's prior: a pool never seen before is placed by its
cloud's word (a price poll records the prior), and the daemon's own observations then
update it."""

from __future__ import annotations

import math

import pytest
from sqlmodel import Session

from providers.base import RiskKind, RiskSignal
from scheduler.core import hazard
from scheduler.state.models import PoolState
from tests.support.fakes import offering

POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
POOL_B = "aws/us-east-1b/p3.2xlarge/spot"


def test_a_cold_pool_is_placed_by_its_clouds_risk_data(make_world):
    w = make_world()
    # A is a little cheaper, but AWS scores it 1 (likely to be taken back); B scores 10.
    w.provider.set_offerings(
        [offering("us-east-1a", price=1.0), offering("us-east-1b", price=1.05)]
    )
    w.provider.set_risk(
        [
            RiskSignal(POOL_A, RiskKind.AWS_PLACEMENT_SCORE, 1),
            RiskSignal(POOL_B, RiskKind.AWS_PLACEMENT_SCORE, 10),
        ]
    )
    w.rec.poll_prices()
    with Session(w.rec.engine) as s:
        a, b = s.get(PoolState, POOL_A), s.get(PoolState, POOL_B)
        assert a is not None and b is not None
        assert a.prior_rate == pytest.approx(0.5) and a.prior_source == "aws score 1"
        assert b.prior_rate == pytest.approx(0.02)
    jid = w.submit(gpus="V100:1", gpu_hours=20)
    w.tick()
    (att,) = w.attempts(jid)
    assert att.pool == POOL_B


def test_the_daemon_records_a_history_or_band_prior_as_it_records_a_score(make_world):
    # The path every signal takes: the price poll asks the provider's risk_signals and
    # records each pool's best prior with its source.
    w = make_world()
    w.provider.set_offerings(
        [offering("us-east-1a", price=1.0), offering("us-east-1b", price=1.05)]
    )
    w.provider.set_risk(
        [
            RiskSignal(POOL_A, RiskKind.GCP_PREEMPTION_HISTORY, 0.2),
            RiskSignal(POOL_B, RiskKind.AZURE_EVICTION_RATE, 25.0, "20+"),
            RiskSignal(POOL_B, RiskKind.AZURE_PLACEMENT_SCORE, 0.0, "High"),
        ]
    )
    w.rec.poll_prices()
    with Session(w.rec.engine) as s:
        a, b = s.get(PoolState, POOL_A), s.get(PoolState, POOL_B)
        assert a is not None and b is not None
        assert (a.prior_rate, a.prior_source) == (pytest.approx(0.25 / 24), "gcp preempted 20%")
        assert (b.prior_rate, b.prior_source) == (
            pytest.approx(-math.log(0.75)),
            "azure eviction 20+%",
        )


def test_without_risk_data_the_cheaper_pool_wins(make_world):
    w = make_world()
    w.provider.set_offerings(
        [offering("us-east-1a", price=1.0), offering("us-east-1b", price=1.05)]
    )
    w.rec.poll_prices()
    jid = w.submit(gpus="V100:1", gpu_hours=20)
    w.tick()
    assert w.attempts(jid)[0].pool == POOL_A


def test_observations_update_the_prior():
    # Ten quiet hours pull a bad score's prior halfway down; a pool seen for days speaks for
    # itself.
    bad = 0.5
    assert hazard.fused_rate(bad, 0, 0) == bad
    assert hazard.fused_rate(bad, 0, hazard.PRIOR_HOURS) == pytest.approx(bad / 2)
    assert hazard.fused_rate(bad, 2, 200) == pytest.approx((2 + bad * 10) / 210)


def test_each_clouds_signal_as_a_rate():
    def rate(kind: RiskKind, value: float, detail: str = "") -> float | None:
        return hazard.prior_rate(RiskSignal("p", kind, value, detail))

    assert rate(RiskKind.AWS_PLACEMENT_SCORE, 10) == pytest.approx(0.02)
    assert rate(RiskKind.AWS_PLACEMENT_SCORE, 1) == pytest.approx(0.5)
    assert rate(RiskKind.AWS_PLACEMENT_SCORE, 5) > rate(RiskKind.AWS_PLACEMENT_SCORE, 6)  # type: ignore[operator]
    assert rate(RiskKind.AWS_PLACEMENT_SCORE, 0) is None
    assert rate(RiskKind.GCP_ESTIMATED_UPTIME, 10) == pytest.approx(0.0693, abs=1e-4)
    assert rate(RiskKind.AZURE_EVICTION_RATE, 7.5, "5-10") == pytest.approx(-math.log(0.925))
    assert rate(RiskKind.AZURE_PLACEMENT_SCORE, 0, "High") == pytest.approx(0.03)
    assert rate(RiskKind.AZURE_PLACEMENT_SCORE, 0, "DataNotFoundOrStale") is None
    # The most direct signal wins: an uptime over a score for the same pool.
    got = hazard.priors(
        [
            RiskSignal("p", RiskKind.AWS_PLACEMENT_SCORE, 1),
            RiskSignal("p", RiskKind.GCP_ESTIMATED_UPTIME, 100),
        ]
    )
    assert got["p"][1] == "gcp uptime 100h"
