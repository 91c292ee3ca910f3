"""The local market's stand-in for the clouds' risk data: each spot pool's signal derived
from its own trace's past, in the shape its cloud publishes.

The local market replays traces that carry no placement scores, so it derives one from the
LOOKBACK before the market's current tick of the pool's series (never its future): losses
per available hour, then given as the pool's cloud would give it: an AWS Spot placement
score (1-10), a GCP estimated uptime (hours), an Azure placement score (High / Medium /
Low), so `spotwise prices -o wide`, the daemon's priors and the report's calibration plot
work on the local market end to end. A stand-in, said so in `prices -o wide`'s FROM column
through the usual words; it is no measurement of any cloud's scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from providers.base import Market, Offering, RiskKind, RiskSignal
from providers.local.trace import Trace

LOOKBACK_HOURS = 72.0
_BASE = 0.1  # per hour, the weight of a few hours' default before losses are counted
_AWS_WORST, _AWS_BEST = 0.5, 0.02  # per hour at score 1 and 10 (scheduler.core.hazard's)


def past_rate(trace: Trace, series: str, tick: int) -> float:
    """Losses per available hour over the LOOKBACK before `tick` (the trace repeats)."""
    gap_h = trace.gap_seconds / 3600
    n = max(2, int(LOOKBACK_HOURS / gap_h))
    s, total = trace.available[series], trace.n_ticks
    start = (tick - n) % total
    window = (s + s)[start : start + n] if n < total else s
    up = window.count("1") * gap_h
    losses = window.count("10")
    return (losses + _BASE * 6) / (up + 6)


def signal_for(o: Offering, rate: float) -> RiskSignal:
    if o.cloud == "gcp":
        return RiskSignal(o.pool, RiskKind.GCP_ESTIMATED_UPTIME, round(math.log(2) / rate, 2))
    if o.cloud == "azure":
        band = "High" if rate < 0.05 else "Medium" if rate < 0.2 else "Low"
        return RiskSignal(o.pool, RiskKind.AZURE_PLACEMENT_SCORE, 0.0, band)
    share = math.log(max(min(rate, _AWS_WORST), _AWS_BEST) / _AWS_WORST) / math.log(
        _AWS_BEST / _AWS_WORST
    )
    return RiskSignal(o.pool, RiskKind.AWS_PLACEMENT_SCORE, float(round(1 + 9 * share)))


def signals(trace: Trace, tick: int, offerings: Sequence[Offering]) -> list[RiskSignal]:
    out = []
    rates: dict[str, float] = {}
    for o in offerings:
        if o.market is not Market.SPOT:
            continue
        series = trace.series_for(o.pool)
        if series not in rates:
            rates[series] = past_rate(trace, series, tick)
        out.append(signal_for(o, rates[series]))
    return out
