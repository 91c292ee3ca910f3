"""A pool's interruption rate: a prior from its cloud's own risk data, updated with what the
daemon observed there. Pure, no I/O.

Each cloud publishes a risk signal for spot capacity, none of them a rate per hour:

- AWS Spot placement score, 1-10 per region or zone ("how likely a Spot request is to
  succeed"; GetSpotPlacementScores). AWS publishes no rate per score, so the mapping is a
  monotone stand-in: log-linear from 0.5/h at 1 to 0.02/h at 10 (about 2 h and 50 h between
  interruptions), bracketing what the replay's traces show for their worst and best pools;
- GCP capacity advice, `estimatedUptime` ("the estimated run time of the majority of Spot
  VMs in the request before preemption"): a median run time, so rate = ln 2 / uptime;
- GCP capacity history, `preemptionRate` per day over the last 30 days: "(total preempted
  Spots) / (total Spots that stopped running)" (compute_v1
  CapacityHistoryResponsePreemptionRecord), a share of the stops, not a rate in time. With
  preemption (rate r) and the owners' own stops (rate u) competing, the share is
  p = r / (r + u), so r = u * p / (1 - p); GCE publishes no u, so the owners' stops are
  taken as one a day (OWNER_STOP_HOURS, a stand-in), p held within [0, 0.95] and the rate
  floored at RATE_FLOOR (a day without a preemption is no promise of none);
- Azure's eviction-rate band ("0-5", ..., "20+" from Resource Graph's SpotResources) is
  "quoted per hour: an eviction rate of 10% means a VM has a 10% chance of being evicted
  within the next hour" (Microsoft Learn, "Use Azure Spot Virtual Machines"), so its band's
  middle p gives rate = -ln(1 - p); Azure's Spot placement score (High / Medium / Low) maps
  to 0.03, 0.1, 0.3 per hour (a stand-in, as for AWS).

When a pool has several, the most direct wins: a measured eviction probability per hour
(Azure's band) first; then GCE's estimated uptime, a duration GCE computes for exactly the
asked zone and shape (its GPUs included) from history and current conditions; then GCE's
preemption history, measured too but a share without a time unit, so its rate rests on the
stand-in above; then the placement scores, which say how likely a request is to be
granted, not how long it lasts. The prior weighs as PRIOR_HOURS observed hours: a pool seen
for minutes takes its cloud's word, one seen for days its own history. A pool with no signal
keeps the configured `[policy] spot_interruption_prior`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from providers.base import RiskKind, RiskSignal

# Weight of a prior, in observed hours (the daemon's fusion always used this much).
PRIOR_HOURS = 10.0

_SCORE_WORST, _SCORE_BEST = 0.5, 0.02  # per hour at AWS score 1 and 10
_AZURE_SCORES = {"high": 0.03, "medium": 0.1, "low": 0.3}
# GCP history: the owners' own stops of Spot VMs taken as one a day (GCE publishes no rate
# for them; its history is cut in days), the share held below MAX_SHARE (all stops being
# preemptions says the rate is high, not infinite), and no pool's rate below RATE_FLOOR.
OWNER_STOP_HOURS = 24.0
MAX_SHARE = 0.95
RATE_FLOOR = 0.005  # per hour: 200 h between interruptions
# The most direct signal first. An uptime outranks the history where both answer: both come
# from GCE's records, but the uptime is already a time for this exact request (the GPUs
# attached included) while the history's share needs the stand-in OWNER_STOP_HOURS to
# become one; the history speaks where the advice gave nothing (no recommendation, the
# permission or the API missing).
_RANK = {
    RiskKind.AZURE_EVICTION_RATE: 0,
    RiskKind.GCP_ESTIMATED_UPTIME: 1,
    RiskKind.GCP_PREEMPTION_HISTORY: 2,
    RiskKind.AWS_PLACEMENT_SCORE: 3,
    RiskKind.AZURE_PLACEMENT_SCORE: 3,
}


def prior_rate(signal: RiskSignal) -> float | None:
    """Interruptions per hour that `signal` implies (None: it says nothing usable)."""
    v = signal.value
    if signal.kind is RiskKind.AWS_PLACEMENT_SCORE:
        if not 1 <= v <= 10:
            return None
        share = (v - 1) / 9  # 0 at the worst score, 1 at the best
        return math.exp(math.log(_SCORE_WORST) + share * math.log(_SCORE_BEST / _SCORE_WORST))
    if signal.kind is RiskKind.GCP_ESTIMATED_UPTIME:
        return math.log(2) / v if v > 0 else None
    if signal.kind is RiskKind.GCP_PREEMPTION_HISTORY:
        if not 0 <= v <= 1:
            return None
        share = min(v, MAX_SHARE)
        return max(share / (1 - share) / OWNER_STOP_HOURS, RATE_FLOOR)
    if signal.kind is RiskKind.AZURE_EVICTION_RATE:
        # a chance of eviction within the next hour -> a rate per hour
        return -math.log(1 - v / 100) if 0 <= v < 100 else None
    if signal.kind is RiskKind.AZURE_PLACEMENT_SCORE:
        return _AZURE_SCORES.get(signal.detail.lower())
    return None


def best_prior(signals: Iterable[RiskSignal]) -> tuple[float, RiskSignal] | None:
    """The prior of the most direct usable signal, with that signal."""
    usable = [(s, r) for s in signals if (r := prior_rate(s)) is not None]
    if not usable:
        return None
    s, r = min(usable, key=lambda x: (_RANK.get(x[0].kind, 9), x[1]))
    return r, s


def priors(signals: Iterable[RiskSignal]) -> dict[str, tuple[float, str]]:
    """pool -> (prior rate per hour, where it came from, in words)."""
    by_pool: dict[str, list[RiskSignal]] = {}
    for s in signals:
        by_pool.setdefault(s.pool, []).append(s)
    out: dict[str, tuple[float, str]] = {}
    for pool, sigs in by_pool.items():
        best = best_prior(sigs)
        if best is not None:
            out[pool] = (best[0], describe(best[1]))
    return out


def describe(signal: RiskSignal) -> str:
    """A signal in a few words, for `prices -o wide` and the report."""
    if signal.kind is RiskKind.AWS_PLACEMENT_SCORE:
        return f"aws score {signal.value:g}"
    if signal.kind is RiskKind.GCP_ESTIMATED_UPTIME:
        return f"gcp uptime {signal.value:g}h"
    if signal.kind is RiskKind.GCP_PREEMPTION_HISTORY:
        return f"gcp preempted {signal.value:.0%}"
    if signal.kind is RiskKind.AZURE_EVICTION_RATE:
        return f"azure eviction {signal.detail or f'{signal.value:g}'}%"
    return f"azure score {signal.detail}"


def fused_rate(
    prior: float, interruptions: float, exposure_hours: float, weight: float = PRIOR_HOURS
) -> float:
    """The pool's rate: its prior (worth `weight` hours) updated with what was observed."""
    return (interruptions + prior * weight) / (exposure_hours + weight)


# "Avoid after interrupt", learned: the outages a pool's interruptions began (from the
# interruption to the next launch there that ran), the newest MAX_OUTAGES of them; with at
# least MIN_OUTAGES the pool's own median outage replaces the configured constant, within
# [AVOID_FLOOR, AVOID_CAP] (a job waits for its pool no longer than a day on this account).
MAX_OUTAGES = 20
MIN_OUTAGES = 3
AVOID_FLOOR_HOURS = 5 / 60
AVOID_CAP_HOURS = 24.0


def avoid_hours(outages: Sequence[float], default_hours: float) -> float:
    """How long a job should stay away from a pool that just interrupted it: the median of
    its recent outages once it has MIN_OUTAGES of them, else `default_hours`."""
    recent = sorted(h for h in outages[-MAX_OUTAGES:] if h >= 0)
    if len(recent) < MIN_OUTAGES:
        return default_hours
    mid = len(recent) // 2
    median = recent[mid] if len(recent) % 2 else (recent[mid - 1] + recent[mid]) / 2
    return min(max(median, AVOID_FLOOR_HOURS), AVOID_CAP_HOURS)
