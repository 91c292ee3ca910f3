"""What a benchmark setting of `spotwise bench deadline` is, and the code that runs it.

Every policy sees the same windows; `optimal` is the DP lower bound computed in the same run.
Score = (cost all on-demand - policy cost) / (cost all on-demand - cost of the work on spot
with no interruption) x 100, from the averages over a setting's runs. A setting that copies a
published protocol may fix those two anchors and average per case first (`anchors`,
`mean_of_cases`), as that protocol does. The settings themselves are in `bench_settings`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from scheduler.core.policy import get_policy
from scheduler.core.policy.optimal import Grid, solve

from .sim import Job, simulate
from .trace import Trace

ONLINE = ("on-demand", "greedy", "uniform-progress", "spotwise")
# spotwise with no warm-up history: a brand-new daemon's first job of a shape
COLD = "spotwise-cold"
ALL = (*ONLINE, COLD, "optimal")


@dataclass(frozen=True)
class Case:
    """One batch of runs sharing a job: the same trace, several start windows."""

    label: str
    trace: Trace
    starts: tuple[int, ...]
    job: Job
    cluster: str = ""  # bootstrap unit: runs sharing it resample together ("": each window)


@dataclass(frozen=True)
class PublishedCheck:
    """Published figures are shown only if the in-run `policy` reproduces the published
    `key` within `tolerance` (in the published unit), on the runs of `case` (all if None)."""

    policy: str
    key: str
    tolerance: float
    case: str | None = None


@dataclass(frozen=True)
class Setting:
    key: str
    title: str
    cases: tuple[Case, ...]
    published: dict[str, float] = field(default_factory=dict)
    published_kind: str = "score"  # or "cost"
    dp_units: int = 10
    anchors: tuple[float, float] | None = None  # fixed (all on-demand, all spot) costs
    mean_of_cases: bool = False  # average each case's runs, then the cases
    check: PublishedCheck | None = None
    windows: str = "protocol windows (train + test)"
    policies: tuple[str, ...] = ()  # empty: ALL


@dataclass
class PolicyStats:
    costs: list[float] = field(default_factory=list)
    misses: int = 0
    weights: list[float] = field(default_factory=list)  # per cost; empty = equal
    seconds: float = 0.0  # wall time in simulate (policy decisions + the simulator's loop)
    decisions: int = 0

    @property
    def ms_per_decision(self) -> float:
        return 1e3 * self.seconds / self.decisions if self.decisions else math.nan

    @property
    def mean(self) -> float:
        if not self.costs:
            return math.nan
        return float(np.average(self.costs, weights=self.weights or None))


BOOTSTRAP = 2000  # resamples for the 95% intervals (seeded: the same run prints the same CI)


@dataclass
class SettingResult:
    """Every run of a setting, kept per window so intervals and per-window comparisons can
    be computed (`clusters[i]` is the bootstrap unit of run i, `cases[i]` its case)."""

    setting: Setting
    runs: int
    stats: dict[str, PolicyStats]
    od_cost: float
    spot_cost: float
    od_costs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    spot_costs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    clusters: list[str] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)
    _boot: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def score(self, policy: str) -> float:
        return 100.0 * (self.od_cost - self.stats[policy].mean) / (self.od_cost - self.spot_cost)

    def ratio(self, policy: str) -> float:
        if "optimal" not in self.stats:
            return math.nan
        return self.stats[policy].mean / self.stats["optimal"].mean

    def _costs(self, policy: str) -> np.ndarray:
        return np.asarray(self.stats[policy].costs, dtype=float)

    def boot_scores(self) -> dict[str, np.ndarray]:
        """Bootstrap replicates of every policy's score, resampling clusters (traces, zone
        sets or start windows, per setting) with replacement; the same draws for all."""
        if self._boot is not None:
            return self._boot
        labels = sorted(set(self.clusters))
        k = len(labels)
        if k < 2:
            self._boot = {}
            return self._boot
        pos = {c: i for i, c in enumerate(labels)}
        idx = np.array([pos[c] for c in self.clusters])
        n = np.bincount(idx, None, k).astype(float)
        rng = np.random.default_rng(0)
        draws = rng.multinomial(k, np.full(k, 1.0 / k), size=BOOTSTRAP).astype(float)
        if self.setting.anchors:
            a_od, a_sp = self.setting.anchors
        else:
            a_od = (draws @ np.bincount(idx, self.od_costs, k)) / (draws @ n)
            a_sp = (draws @ np.bincount(idx, self.spot_costs, k)) / (draws @ n)
        out = {}
        for p, st in self.stats.items():
            w = np.asarray(st.weights, float) if st.weights else np.ones(self.runs)
            wc = np.bincount(idx, w * self._costs(p), k)
            ww = np.bincount(idx, w, k)
            mean = (draws @ wc) / np.maximum(draws @ ww, 1e-12)
            out[p] = 100.0 * (a_od - mean) / (a_od - a_sp)
        self._boot = out
        return out

    def score_ci(self, policy: str, level: float = 0.95) -> tuple[float, float]:
        reps = self.boot_scores().get(policy)
        if reps is None:
            return (math.nan, math.nan)
        lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)

    def delta(self, policy: str, others: tuple[str, ...]) -> tuple[float, float, float]:
        """Score of `policy` minus the best of `others` (per replicate), with its 95% CI."""
        point = self.score(policy) - max(self.score(o) for o in others)
        d = self.delta_replicates(policy, others)
        if d is None:
            return point, math.nan, math.nan
        lo, hi = np.quantile(d, [0.025, 0.975])
        return point, float(lo), float(hi)

    def delta_replicates(self, policy: str, others: tuple[str, ...]) -> np.ndarray | None:
        """`policy`'s score minus the best of `others`, per bootstrap replicate (None with
        fewer than two clusters)."""
        boot = self.boot_scores()
        if not boot:
            return None
        return boot[policy] - np.max(np.stack([boot[o] for o in others]), axis=0)

    def worse_than(self, policy: str, other: str = "uniform-progress") -> float:
        """Share of windows (%) where `policy` cost more than `other` (by over 1 cent)."""
        if other not in self.stats or not self.runs:
            return math.nan
        return float(100.0 * np.mean(self._costs(policy) > self._costs(other) + 0.01))

    def worst_vs_on_demand(self, policy: str) -> float:
        """The largest cost / all-on-demand cost over the windows."""
        return float(np.max(self._costs(policy) / self.od_costs)) if self.runs else math.nan

    def above_on_demand(self, policy: str) -> float:
        """Share of windows (%) costing more than all-on-demand."""
        if not self.runs:
            return math.nan
        return float(100.0 * np.mean(self._costs(policy) > self.od_costs * (1 + 1e-9)))

    def case_mean(self, policy: str, case: str | None) -> float:
        c = self._costs(policy)
        if case is None:
            return self.stats[policy].mean
        sel = np.array([x == case for x in self.cases])
        return float(c[sel].mean())

    def subset(self, keep: Callable[[str], bool]) -> SettingResult:
        """The runs whose case label passes `keep`, anchors recomputed (unless fixed)."""
        sel = np.array([keep(c) for c in self.cases], dtype=bool)
        stats = {}
        for p, st in self.stats.items():
            costs = [c for c, k in zip(st.costs, sel, strict=True) if k]
            w = [x for x, k in zip(st.weights, sel, strict=True) if k] if st.weights else []
            stats[p] = PolicyStats(costs, st.misses, w, st.seconds, st.decisions)
        od, sp = self.od_costs[sel], self.spot_costs[sel]
        anchors = self.setting.anchors or (
            (float(od.mean()), float(sp.mean())) if sel.any() else (math.nan, math.nan)
        )
        return SettingResult(
            self.setting, int(sel.sum()), stats, anchors[0], anchors[1], od, sp,
            [c for c, k in zip(self.clusters, sel, strict=True) if k],
            [c for c, k in zip(self.cases, sel, strict=True) if k],
        )  # fmt: skip

    def published_status(self) -> tuple[bool, str]:
        """(show the published figures?, the sentence saying why)."""
        chk = self.setting.check
        if not self.setting.published:
            return False, ""
        if chk is None or chk.policy not in self.stats:
            return False, "published figures dropped: no in-run baseline to check them against"
        pub = self.setting.published[chk.key]
        if self.setting.published_kind == "score":
            got = self.score(chk.policy)
            unit = "score"
        else:
            got = self.case_mean(chk.policy, chk.case)
            unit = "$"
        where = f" on the {chk.case} windows" if chk.case else ""
        ok = abs(got - pub) <= chk.tolerance
        verdict = "reproduces" if ok else "does NOT reproduce"
        msg = (
            f"in-run {chk.policy} {unit} {got:.2f}{where} {verdict} the published "
            f"{chk.key} {pub:g} (tolerance +-{chk.tolerance:g})"
        )
        if not ok:
            msg += ": different simulator, published figures not shown"
        return ok, msg


HISTORY_HOURS = 7 * 24.0  # what a daemon running for a week has seen of each pool


def _windows(case: Case) -> Iterator[Trace]:
    for win, _ in _windows_with_history(case):
        yield win


def _windows_with_history(case: Case) -> Iterator[tuple[Trace, Trace]]:
    length = math.ceil(case.job.deadline / case.trace.gap_hours - 1e-9)
    hist = round(HISTORY_HOURS / case.trace.gap_hours)
    for s in case.starts:
        h0 = max(0, s - hist)
        yield case.trace.window(s, length), case.trace.window(h0, s - h0)


def optimal_costs(case: Case, units: int) -> np.ndarray:
    """DP lower bound for every window of a case, batched."""
    wins = list(_windows(case))
    grid = Grid.make(
        case.trace.gap_hours, case.job.work, case.job.restart_overhead, case.job.deadline, units
    )
    avail = np.stack([w.available for w in wins])
    price = np.stack([w.spot_price for w in wins])
    cost, _ = solve(avail, price, case.trace.on_demand_price, grid)
    return cost


@dataclass
class CaseResult:
    costs: dict[str, list[float]]
    misses: dict[str, int]
    od_costs: list[float]
    spot_costs: list[float]
    label: str = ""
    clusters: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    decisions: dict[str, int] = field(default_factory=dict)


def run_case(case: Case, policies: tuple[str, ...], dp_units: int) -> CaseResult:
    """All policies over every window of one case (picklable: runs in worker processes)."""
    res = CaseResult({p: [] for p in policies}, dict.fromkeys(policies, 0), [], [], case.label)
    job = case.job
    for s, (win, past) in zip(case.starts, _windows_with_history(case), strict=True):
        res.clusters.append(case.cluster or f"{case.label}@{s}")
        res.od_costs.append((job.work + job.restart_overhead) * win.on_demand_price)
        # spot at its own price, capped at on-demand (above it one would run on-demand)
        cheapest = float(np.minimum(win.spot_price, win.on_demand_price).mean(axis=1).min())
        res.spot_costs.append((job.work + job.restart_overhead) * cheapest)
        for name in policies:
            if name == "optimal":
                continue
            cold = name == COLD
            t0 = time.perf_counter()
            out = simulate(win, job, get_policy("spotwise" if cold else name),
                           history=None if cold else past)  # fmt: skip
            res.seconds[name] = res.seconds.get(name, 0.0) + time.perf_counter() - t0
            ticks = min(win.n_ticks, math.ceil(job.deadline / win.gap_hours - 1e-9),
                        math.floor(out.finish_time / win.gap_hours - 1e-9) + 1)  # fmt: skip
            res.decisions[name] = res.decisions.get(name, 0) + ticks
            res.costs[name].append(out.cost)
            res.misses[name] += not out.met_deadline
    if "optimal" in policies:
        res.costs["optimal"] = [float(c) for c in optimal_costs(case, dp_units)]
    return res


def pooled_delta(
    results: list[SettingResult], policy: str, others: tuple[str, ...]
) -> tuple[float, float, float]:
    """The mean over settings of `policy`'s score minus the best of `others`, with a 95% CI.

    Each setting's bootstrap is seeded alike, so over the same clusters (the sweep's cells
    all hold every trace and zone set of the split) its replicate b resamples the same
    clusters in every setting, and averaging replicates across settings is a bootstrap of
    the average. Settings over different clusters give no interval (NaN)."""
    point = float(np.mean([r.delta(policy, others)[0] for r in results]))
    reps = [d for r in results if (d := r.delta_replicates(policy, others)) is not None]
    if len({tuple(sorted(set(r.clusters))) for r in results}) != 1 or len(reps) < len(results):
        return point, math.nan, math.nan
    lo, hi = np.quantile(np.mean(reps, axis=0), [0.025, 0.975])
    return point, float(lo), float(hi)


def collect(setting: Setting, results: list[CaseResult]) -> SettingResult:
    names = tuple(results[0].costs) if results else ()
    stats = {p: PolicyStats() for p in names}
    od, spot, clusters, cases = [], [], [], []
    for r in results:
        od += r.od_costs
        spot += r.spot_costs
        clusters += r.clusters or [r.label] * len(r.od_costs)
        cases += [r.label] * len(r.od_costs)
        for p in names:
            stats[p].costs += r.costs[p]
            stats[p].misses += r.misses[p]
            stats[p].seconds += r.seconds.get(p, 0.0)
            stats[p].decisions += r.decisions.get(p, 0)
            if setting.mean_of_cases:
                stats[p].weights += [1.0 / len(r.costs[p])] * len(r.costs[p])
    od_cost, spot_cost = setting.anchors or (float(np.mean(od)), float(np.mean(spot)))
    return SettingResult(
        setting, len(od), stats, od_cost, spot_cost, np.asarray(od), np.asarray(spot),
        clusters, cases,
    )  # fmt: skip


def run_setting(
    setting: Setting,
    policies: tuple[str, ...] = ALL,
    progress: Callable[[str], None] | None = None,
) -> SettingResult:
    """Serial run of one setting (the CLI runs cases in a process pool instead)."""
    results = []
    policies = setting.policies or policies
    for i, case in enumerate(setting.cases):
        if progress:
            progress(f"{setting.key}: case {i + 1}/{len(setting.cases)} {case.label}")
        results.append(run_case(case, policies, setting.dp_units))
    return collect(setting, results)
