"""The benchmark settings of `spotwise bench deadline`: which traces, windows, jobs and
policies each setting replays (the published protocols, the train/test split settings, gangs,
price spikes and the overhead x slack sweep). `scenarios` holds what a setting is and the
code that runs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .datasets import cbl_2022, v100_2023
from .scenarios import (
    COLD,
    HISTORY_HOURS,
    ONLINE,
    Case,
    PublishedCheck,
    Setting,
)
from .sim import Job
from .split import ZONE_SETS_2023, Split, describe, half_2023, periods
from .trace import Trace


def _even_starts(n_ticks: int, length: int, count: int) -> tuple[int, ...]:
    return tuple(int(s) for s in np.linspace(0, n_ticks - length, count).round())


def single_region(windows: int = 30) -> Setting:
    """Can't-Be-Late protocol: 2022 us-west-2a/2b V100+K80 x1/x8, 48 h task."""
    cases = []
    for name, trace in cbl_2022().items():
        longest = math.ceil(70 / trace.gap_hours)
        starts = _even_starts(trace.n_ticks, longest, windows)
        for deadline in (52.0, 70.0):
            for overhead in (0.02, 0.05, 0.1):
                job = Job(48.0, deadline, overhead)
                label = f"{name} d={deadline:g} o={overhead:g}"
                cases.append(Case(label, trace, starts, job, cluster=name))
    return Setting(
        "single-region",
        "single region (2022 us-west-2a/2b, 8 traces)",
        tuple(cases),
        # The leaderboard measured these on 6 of the traces (which ones is not published):
        # shown only if our greedy lands on its greedy.
        {"greedy": 28.0, "best published": 51.0},
        check=PublishedCheck("greedy", "greedy", 3.0),
    )


def multi_region(windows: int = 30) -> Setting:
    """9-zone 2023 V100 trace with per-tick spot prices, 48 h task, 52 h deadline."""
    trace = v100_2023()
    starts = _even_starts(trace.n_ticks, math.ceil(52 / trace.gap_hours), windows)
    cases = tuple(
        Case(f"9 zones o={o:g}", trace, starts, Job(48.0, 52.0, o)) for o in (0.02, 0.05, 0.1)
    )
    return Setting(
        "multi-region",
        "multi-region (2023 V100, 9 zones, per-tick prices)",
        cases,
        {},  # the often-quoted 64.6 / 68.7 belong to ADRS's protocol: see adrs_multi()
        dp_units=4,
    )


# SkyNomad artifact, results/v100.csv: V100 Cross-Area (3 regions), 5 windows.
SKYNOMAD_ZONES = ("us-east-1c", "us-east-2b", "us-west-2a")
SKYNOMAD_START_HOURS = (179.725, 299.5416666666667, 419.35833333333335, 479.26666666666665,
                        838.7166666666667)  # fmt: skip
SKYNOMAD_JOB = Job(
    work=39.93888888888889,
    deadline=59.90833333333333,
    restart_overhead=0.2,
    migration_cost=1.0,  # 50 GB checkpoint x $0.02/GB inter-region transfer
)


SKYNOMAD_EXTRA = 19  # more start times, evenly spaced, beyond the artifact's five


def skynomad_3zone(extra: int = SKYNOMAD_EXTRA) -> Setting:
    """The artifact's five windows (the published figures are checked on these) plus
    `extra` evenly spaced start times over the same trace."""
    full = v100_2023().select(SKYNOMAD_ZONES)
    starts = tuple(round(h * 3600 / 195) for h in SKYNOMAD_START_HOURS)
    length = math.ceil(SKYNOMAD_JOB.deadline / full.gap_hours)
    more = tuple(s for s in _even_starts(full.n_ticks, length, extra + 2)[1:-1] if s)
    cases = [Case("published 5", full, starts, SKYNOMAD_JOB)]
    if extra:
        cases.append(Case(f"{len(more)} more", full, more, SKYNOMAD_JOB))
    return Setting(
        "skynomad-3zone",
        "SkyNomad V100 3 zones (us-east-1c/2b, us-west-2a; o=0.2 h, $1/migration)",
        tuple(cases),
        {"optimal": 37.37, "SkyNomad": 41.73, "UP(S)": 47.02},
        published_kind="cost",
        dp_units=4,
        check=PublishedCheck("uniform-progress", "UP(S)", 0.05 * 47.02, "published 5"),
    )


# ADRS leaderboard, problem cant_be_late_multi (UCB-ADRS/ADRS-Leaderboard,
# problems/cant_be_late_multi/evaluator.py and README.md): six zone subsets of the same 2023
# V100 trace, each run over the first N of the 60 h windows that the artifact's
# create_aligned_traces.py samples (numpy seed 0); 48 h task, 52 h deadline, 0.2 h restart
# overhead, no migration charge; the simulator bills spot at sky_spot's flat COSTS
# ($0.9731/h, on-demand $3.06/h). Score: mean cost per scenario, mean over the scenarios,
# against the fixed anchors 3.06 x 48 and 0.9731 x 48.
ADRS_SCENARIOS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("2 zones same region", ("us-east-1a", "us-east-1c"), 8),
    ("2 regions east-west", ("us-east-2a", "us-west-2a"), 8),
    ("3 regions diverse", ("us-east-1a", "us-east-2b", "us-west-2c"), 6),
    ("3 zones same region", ("us-east-1a", "us-east-1c", "us-east-1d"), 6),
    ("5 regions", ("us-east-1a", "us-east-1f", "us-west-2a", "us-west-2b", "us-east-2b"), 4),
    ("all 9 zones", ("us-east-2a", "us-west-2c", "us-east-1d", "us-east-2b", "us-west-2a",
                     "us-east-1f", "us-east-1a", "us-west-2b", "us-east-1c"), 2),
)  # fmt: skip
ADRS_SPOT = 0.9731
ADRS_WINDOW_HOURS = 60
ADRS_JOB = Job(48.0, 52.0, 0.2)


def adrs_window_starts(n_ticks: int, gap_seconds: int, count: int) -> tuple[int, ...]:
    """Start ticks of the artifact's numbered windows 0..count-1 (np.random.seed(0), then one
    randint(0, n_ticks - window) per window, as create_aligned_traces.py does)."""
    rng = np.random.RandomState(0)
    top = n_ticks - int(ADRS_WINDOW_HOURS * 3600 / gap_seconds)
    return tuple(int(rng.randint(0, top)) for _ in range(count))


def adrs_multi(quick: bool = False) -> Setting:
    full = v100_2023()
    starts = adrs_window_starts(full.n_ticks, round(full.gap_hours * 3600), 8)
    cases = []
    for label, zones, n in ADRS_SCENARIOS:
        sel = full.select(zones)
        flat = Trace(sel.zones, sel.gap_hours, sel.available,
                     np.full(sel.available.shape, ADRS_SPOT), full.on_demand_price,
                     sel.regions, f"{full.name} {label}")  # fmt: skip
        cases.append(Case(label, flat, starts[: 1 if quick else n], ADRS_JOB, cluster=label))
    return Setting(
        "adrs-multi",
        "ADRS cant_be_late_multi (2023 V100, 6 zone sets, flat $0.9731 spot, o=0.2 h)",
        tuple(cases),
        {"baseline (initial program)": 64.58, "OpenEvolve": 66.7, "ShinkaEvolve": 67.74,
         "GEPA (best)": 68.74},
        dp_units=4,
        anchors=(full.on_demand_price * ADRS_JOB.work, ADRS_SPOT * ADRS_JOB.work),
        mean_of_cases=True,
        check=PublishedCheck("uniform-progress", "baseline (initial program)", 2.0),
    )  # fmt: skip


def settings(quick: bool = False) -> list[Setting]:
    """The protocol settings, then the split settings on the test split."""
    if quick:
        single = single_region(windows=2)
        single = replace(single, cases=tuple(c for c in single.cases if "d=52 o=0.1" in c.label))
        multi = multi_region(windows=3)
        multi = replace(multi, cases=multi.cases[-1:])
        protocol = [single, multi, skynomad_3zone(extra=0), adrs_multi(quick=True)]
    else:
        protocol = [single_region(), multi_region(), skynomad_3zone(), adrs_multi()]
    return protocol + split_settings(Split.TEST, quick)


def split_settings(split: Split, quick: bool = False) -> list[Setting]:
    """The settings whose windows follow the train/test split (price spikes, gangs): on
    TRAIN they are what their rules are tuned on, on TEST what is reported."""
    return [price_spike(quick, split), gang(quick, split=split)]


def _half(split: Split, n_ticks: int, length: int, count: int) -> tuple[int, ...]:
    """`count` even window starts inside the split's half of the 2023 trace."""
    lo, hi = half_2023(split, n_ticks)
    return tuple(lo + s for s in _even_starts(hi - lo, length, count))


SPLIT_WINDOWS = 20  # per pool, in each split setting
# The pools of the split settings: a zone set and a zone alone, both of the split's zones.
SPLIT_POOLS = {
    Split.TRAIN: (ZONE_SETS_2023[Split.TRAIN][0], ("us-east-2a",)),
    Split.TEST: (ZONE_SETS_2023[Split.TEST][0], ("us-west-2a",)),
}


# ---- gangs (a job of N nodes in one pool) ------------------------------------------------

GANG_NODES = 4
GANG_SEED = 4


def gang(quick: bool = False, nodes: int = GANG_NODES, split: Split = Split.TEST) -> Setting:
    """A gang of `nodes` instances (N x the price, any of N nodes can be taken back:
    trace.gang_trace) over the split's zone set and zone alone, in its half of 2023."""
    from .trace import gang_trace

    full = v100_2023()
    job = Job(48.0, 60.0, 0.2)
    length = math.ceil(job.deadline / full.gap_hours)
    starts = _half(split, full.n_ticks, length, 2 if quick else SPLIT_WINDOWS)
    cases = []
    for zones in SPLIT_POOLS[split]:
        g = gang_trace(full.select(zones), nodes, seed=GANG_SEED)
        label = f"{nodes} nodes, {len(zones)} zone{'s' if len(zones) > 1 else ''}"
        cases.append(Case(label, g, starts, job))
    return Setting(
        "gang",
        f"gangs of {nodes} nodes in one pool (N x price, N x the interruption rate; 48 h, "
        "60 h, o=0.2)",
        tuple(cases),
        dp_units=4,
        windows=describe(split, only_2023=True),
    )


# ---- price spikes (synthetic, on the test split) ---------------------------------------

SPIKE_SEED = 2026
SPIKES_PER_DAY = 0.5  # per zone
SPIKE_HOURS = (1.0, 8.0)
SPIKE_LEVEL = (1.1, 3.0)  # x on-demand


def with_spikes(trace: Trace, seed: int = SPIKE_SEED) -> Trace:
    """`trace` with price spikes laid over its real prices: per zone, spikes start at
    SPIKES_PER_DAY (Poisson), last SPIKE_HOURS and reach SPIKE_LEVEL x on-demand (uniform).
    Availability is unchanged: the spot market keeps the instance, at the spiked price."""
    rng = np.random.default_rng(seed)
    price = trace.spot_price.copy()
    g = trace.gap_hours
    for z in range(price.shape[0]):
        n = rng.poisson(SPIKES_PER_DAY * trace.n_ticks * g / 24.0)
        for start in rng.integers(0, trace.n_ticks, n):
            length = max(1, round(rng.uniform(*SPIKE_HOURS) / g))
            level = rng.uniform(*SPIKE_LEVEL) * trace.on_demand_price
            sl = slice(int(start), int(start) + length)
            price[z, sl] = np.maximum(price[z, sl], level)
    return Trace(trace.zones, g, trace.available, price, trace.on_demand_price, trace.regions,
                 f"{trace.name} +spikes")  # fmt: skip


def price_spike(quick: bool = False, split: Split = Split.TEST) -> Setting:
    """The split's zone set and zone alone, in its half of 2023, with spikes."""
    full = v100_2023()
    job = Job(48.0, 60.0, 0.2)
    length = math.ceil(job.deadline / full.gap_hours)
    starts = _half(split, full.n_ticks, length, 2 if quick else SPLIT_WINDOWS)
    cases = []
    for zones in SPLIT_POOLS[split]:
        spiky = with_spikes(full.select(zones))
        label = f"{len(zones)} zone{'s' if len(zones) > 1 else ''} ({', '.join(zones)})"
        cases.append(Case(label, spiky, starts, job))
    return Setting(
        "price-spike",
        "price spikes to 1.1-3x on-demand (synthetic, on real 2023 prices; 48 h, 60 h, o=0.2)",
        tuple(cases),
        dp_units=4,
        windows=describe(split, only_2023=True),
    )


# ---- the overhead x slack sweep (test split by default) ---------------------------------

SWEEP_OVERHEADS = (0.02, 0.1, 0.2, 0.5, 1.0)
SWEEP_SLACKS = (1.05, 1.2, 1.5, 2.0)
SWEEP_LENGTHS = (12.0, 48.0, 96.0)
SWEEP_WINDOWS = 2  # per trace / zone set, length and cell
MAX_SWEEP_WINDOWS = 32  # `--windows` above this would take hours on two cores


def is_multi_zone(case_label: str) -> bool:
    """Sweep case labels name their zone set ("2023 3 zones (...) w=48")."""
    return " zones (" in case_label


# The kinds of trace the sweep reports apart, by case label.
TRACE_KINDS: dict[str, Callable[[str], bool]] = {
    "single_zone": lambda label: not is_multi_zone(label),
    "multi_zone": is_multi_zone,
}


def sweep(
    split: Split = Split.TEST, quick: bool = False, windows: int | None = None
) -> list[Setting]:
    """One setting per (overhead, slack) cell; each holds every period of the split at every
    task length, `windows` start windows each (SWEEP_WINDOWS, 1 when quick). No DP here (too
    large at 96 h); scores use the in-run anchors."""
    overheads: tuple[float, ...] = SWEEP_OVERHEADS
    slacks: tuple[float, ...] = SWEEP_SLACKS
    lengths: tuple[float, ...] = SWEEP_LENGTHS
    n = windows or (1 if quick else SWEEP_WINDOWS)
    pers = periods(split)
    if quick:
        overheads, slacks, lengths = (0.05, 1.0), (1.2,), (12.0,)
        pers = [pers[0], pers[-1]]
    out = []
    for o in overheads:
        for k in slacks:
            cases = []
            for w in lengths:
                job = Job(w, w * k, o)
                if job.deadline - w < 2 * o:  # no room for one restart even on on-demand
                    continue
                for per in pers:
                    length = math.ceil(job.deadline / per.trace.gap_hours - 1e-9)
                    hist = round(HISTORY_HOURS / per.trace.gap_hours)
                    lo = max(per.lo, hist)  # every window gets its week of history
                    starts = tuple(int(x) for x in np.linspace(lo, per.hi - length, n + 2)[1:-1])
                    cases.append(Case(f"{per.label} w={w:g}", per.trace, starts, job,
                                      cluster=per.label))  # fmt: skip
            out.append(
                Setting(
                    f"sweep o={o:g} slack={k:g}",
                    f"overhead {o:g} h, deadline {k:g}x the task",
                    tuple(cases),
                    windows=describe(split),
                    policies=(*ONLINE, COLD),
                )
            )
    return out
