"""Replay benchmarks for the clouds' risk data and "auto" checkpointing, on the test split.

Two questions, each answered side by side on the same job windows:

- **Prior vs no prior, cold pools.** Every job starts with no history of any pool (a daemon
  that never saw them). Without a prior, every pool is assumed to interrupt at the
  configured 0.1/h and the job takes the cheapest available one; with a prior, each pool
  starts from a rate derived from a STAND-IN for the cloud's risk data: the pool's own
  interruption rate over the LOOKBACK_HOURS before the job's start in the same trace (its
  past only, never its future), coarsened to an AWS-like 1-10 placement score and read back
  through `scheduler.core.hazard` exactly as a real score is. No real placement-score
  history exists for the shipped traces; the stand-in says how much a calibrated signal of
  that coarseness is worth, not what AWS's scores are worth.
- **Auto vs fixed checkpoint intervals.** The same jobs checkpoint every 10 min, 30 min,
  1 h, or at Young/Daly's interval for the stand-in prior of the zones they may use
  (`scheduler.core.checkpointing`), each checkpoint costing SAVE_HOURS; interruptions lose
  the work since the last checkpoint. Cost and time to finish, with 95% intervals.

Nothing here is tuned: the lookback, the score coarsening and the job shapes are fixed below,
chosen before running the test split (the train split was only used to check that the
stand-in prior is not degenerate).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from providers.base import RiskKind, RiskSignal
from scheduler.core import hazard
from scheduler.core.checkpointing import young_daly
from scheduler.core.policy.base import Observation, Policy
from scheduler.core.policy.basic import GreedyPolicy
from scheduler.lab.replay.sim import Job, Outcome, simulate
from scheduler.lab.replay.split import Period, Split, periods
from scheduler.lab.replay.trace import Trace

LOOKBACK_HOURS = 72.0
DEFAULT_RATE = 0.1  # [policy] spot_interruption_prior's default
STRIDE_HOURS = 12.0  # one job window every this many hours of each period
SAVE_HOURS = 2 / 60  # a two-minute checkpoint
JOB = Job(work=12.0, deadline=36.0, restart_overhead=0.1)
# The interval benchmark gives the job room (60 h): its question is what saving and redoing
# work cost, not whether a policy that does not see save time keeps a tight deadline.
INTERVAL_JOB = Job(work=12.0, deadline=60.0, restart_overhead=0.1)
FIXED = {"10m": 10 / 60, "30m": 0.5, "1h": 1.0}


def stand_in_rates(
    trace: Trace, start: int, lookback_hours: float = LOOKBACK_HOURS
) -> dict[str, float]:
    """Each zone's prior from the trace's past: losses per up-hour over the lookback,
    coarsened to a 1-10 score and read as `hazard.prior_rate` reads an AWS score."""
    g = trace.gap_hours
    lo = max(0, start - int(lookback_hours / g))
    out: dict[str, float] = {}
    for i, zone in enumerate(trace.zones):
        avail = trace.available[i, lo:start]
        up = float(avail.sum()) * g
        losses = int(np.sum(avail[:-1] & ~avail[1:])) if len(avail) > 1 else 0
        rate = (losses + DEFAULT_RATE * 6) / (up + 6)  # a few hours' weight of the default
        score = _score_for(rate)
        r = hazard.prior_rate(RiskSignal(zone, RiskKind.AWS_PLACEMENT_SCORE, score))
        out[zone] = DEFAULT_RATE if r is None else r
    return out


def _score_for(rate: float) -> int:
    """The 1-10 score whose hazard.prior_rate is nearest `rate` (log scale)."""
    best, err = 1, math.inf
    for s in range(1, 11):
        r = hazard.prior_rate(RiskSignal("", RiskKind.AWS_PLACEMENT_SCORE, s)) or DEFAULT_RATE
        e = abs(math.log(r) - math.log(max(rate, 1e-6)))
        if e < err:
            best, err = s, e
    return best


class ExpectedCostGreedy(GreedyPolicy):
    """Greedy (spot while it can, on-demand once slack runs out), choosing among available
    zones by placement's expected cost, price x (1 + rate x loss per interruption), with
    each zone's rate its prior fused with what this job saw (no history before it)."""

    name = "expected-cost-greedy"

    def __init__(self, priors: Mapping[str, float] | None) -> None:
        self.priors = dict(priors or {})
        self.reset()

    def reset(self) -> None:
        self.up: dict[str, float] = {}
        self.losses: dict[str, int] = {}
        self._last: dict[str, bool] = {}
        self._t: float | None = None

    def observe(self, obs: Observation) -> None:
        dt = 0.0 if self._t is None else obs.elapsed - self._t
        self._t = obs.elapsed
        for z, ok in obs.spot_available.items():
            was = self._last.get(z)
            if was:
                self.up[z] = self.up.get(z, 0.0) + dt
                if not ok:
                    self.losses[z] = self.losses.get(z, 0) + 1
            self._last[z] = ok

    def rate(self, zone: str) -> float:
        prior = self.priors.get(zone, DEFAULT_RATE)
        return hazard.fused_rate(prior, self.losses.get(zone, 0), self.up.get(zone, 0.0))

    def choose_zone(self, obs: Observation) -> str | None:
        """The available zone with the lowest price x (1 + rate x loss per interruption)."""
        loss = obs.expected_loss_per_interruption
        return min(
            obs.available_zones(),
            key=lambda z: (obs.spot_price.get(z, math.inf) * (1 + self.rate(z) * loss), z),
            default=None,
        )


@dataclass
class Summary:
    label: str
    n: int
    cost_mean: float
    cost_ci: float  # half-width of the 95% interval of the mean
    finish_mean: float
    finish_ci: float
    misses: int
    interruptions: float  # mean per job

    def row(self) -> list[str]:
        return [
            self.label, str(self.n), f"{self.cost_mean:.2f} ± {self.cost_ci:.2f}",
            f"{self.finish_mean:.2f} ± {self.finish_ci:.2f}", str(self.misses),
            f"{self.interruptions:.2f}",
        ]  # fmt: skip


def summarise(label: str, outs: Sequence[Outcome]) -> Summary:
    cost = np.array([o.cost for o in outs])
    fin = np.array([o.finish_time for o in outs])

    def ci(x: np.ndarray) -> float:
        return float(1.96 * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0

    return Summary(
        label, len(outs), float(cost.mean()), ci(cost), float(fin.mean()), ci(fin),
        sum(1 for o in outs if not o.met_deadline),
        float(np.mean([o.interruptions for o in outs])),
    )  # fmt: skip


def windows(split: Split, multi_zone: bool | None, job: Job = JOB) -> list[tuple[Period, int]]:
    """(period, start tick) of every job window: after LOOKBACK_HOURS of the trace (its past
    feeds the stand-in), one every STRIDE_HOURS, each with the whole deadline inside."""
    out = []
    for p in periods(split):
        if multi_zone is not None and p.multi_zone != multi_zone:
            continue
        g = p.trace.gap_hours
        first = max(p.lo, int(LOOKBACK_HOURS / g))
        last = p.hi - math.ceil(job.deadline / g)
        for start in range(first, last, max(1, int(STRIDE_HOURS / g))):
            out.append((p, start))
    return out


def _run(
    wins: Sequence[tuple[Period, int]],
    job_of: Callable[[Trace, int], Job],
    policy_of: Callable[[Trace, int], Policy],
    shape: Job = JOB,
) -> list[Outcome]:
    outs = []
    for p, start in wins:
        length = min(p.hi - start, math.ceil(shape.deadline / p.trace.gap_hours))
        window = p.trace.window(start, length)
        outs.append(simulate(window, job_of(p.trace, start), policy_of(p.trace, start)))
    return outs


def prior_bench(split: Split = Split.TEST) -> list[Summary]:
    """Cold pools with and without the stand-in prior, on the split's multi-zone windows."""
    wins = windows(split, multi_zone=True)
    job = Job(JOB.work, JOB.deadline, JOB.restart_overhead, checkpoint_interval=0.5)
    return [
        summarise("no prior", _run(wins, lambda t, s: job, lambda t, s: ExpectedCostGreedy(None))),
        summarise(
            "stand-in prior",
            _run(wins, lambda t, s: job, lambda t, s: ExpectedCostGreedy(stand_in_rates(t, s))),
        ),
    ]


def interval_bench(split: Split = Split.TEST) -> list[Summary]:
    """Fixed intervals against Young/Daly on the stand-in prior, every window of the split."""
    j = INTERVAL_JOB
    wins = windows(split, multi_zone=None, job=j)

    def fixed(hours: float) -> Callable[[Trace, int], Job]:
        return lambda t, s: Job(j.work, j.deadline, j.restart_overhead, hours, 0.0, None,
                                SAVE_HOURS)  # fmt: skip

    def auto(t: Trace, s: int) -> Job:
        rates = stand_in_rates(t, s)
        rate = min(rates.values())  # the pool the job would prefer
        hours = young_daly(SAVE_HOURS * 3600, rate).total_seconds() / 3600
        return Job(j.work, j.deadline, j.restart_overhead, hours, 0.0, None, SAVE_HOURS)

    out = []
    for label, hours in FIXED.items():
        runs = _run(wins, fixed(hours), lambda t, s: _greedy(), j)
        out.append(summarise(f"fixed {label}", runs))
    out.append(summarise("auto (Young/Daly)", _run(wins, auto, lambda t, s: _greedy(), j)))
    return out


def _greedy() -> Policy:
    return GreedyPolicy()
