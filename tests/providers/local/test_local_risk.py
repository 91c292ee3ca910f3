"""The local market's stand-in risk data: each spot pool's signal from its trace's past, in
its cloud's own shape, so priors, `prices -o wide` and the calibration plot work locally."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from providers.base import Market, RiskKind
from providers.local import LocalMarket, LocalSettings
from providers.local.risk import past_rate
from scheduler.core import hazard


class _Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t


def test_every_spot_pool_gets_its_clouds_kind_of_signal(tmp_path: Path) -> None:
    m = LocalMarket(LocalSettings(state_dir=tmp_path), clock=_Clock())
    offers = m.offerings()
    got = {s.pool: s for s in m.risk_signals(offers)}
    spot = [o for o in offers if o.market is Market.SPOT]
    assert spot and {o.pool for o in spot} == set(got)
    kinds = {o.cloud: got[o.pool].kind for o in spot}
    assert kinds.get("aws", RiskKind.AWS_PLACEMENT_SCORE) is RiskKind.AWS_PLACEMENT_SCORE
    assert kinds.get("gcp", RiskKind.GCP_ESTIMATED_UPTIME) is RiskKind.GCP_ESTIMATED_UPTIME
    assert kinds.get("azure", RiskKind.AZURE_PLACEMENT_SCORE) is RiskKind.AZURE_PLACEMENT_SCORE
    assert all(hazard.prior_rate(s) is not None for s in got.values())


def test_the_rate_reads_only_the_past(tmp_path: Path) -> None:
    m = LocalMarket(LocalSettings(state_dir=tmp_path), clock=_Clock())
    t = m.trace
    series = t.series[0]
    tick = t.n_ticks // 2
    before = past_rate(t, series, tick)
    s = t.available[series]
    changed = s[:tick] + "0" * (len(s) - tick)  # any future at all
    t.available[series] = changed
    try:
        assert past_rate(t, series, tick) == before
    finally:
        t.available[series] = s
