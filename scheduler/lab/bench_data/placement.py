"""Workload and baseline for `spotwise bench placement`.

The baseline is what a competent engineer would write without the columnar catalog: a pandas
DataFrame of all offerings grouped by GPU model once, each request masking its group and
taking the argmin of the same expected-cost formula.
Both sides must pick an offering of the same expected cost; mismatches are counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from providers.base import Market, Offering
from scheduler.core.catalog import Catalog
from scheduler.core.jobspec import GpuSpec
from scheduler.core.placement import (
    DEFAULT_SPOT_INTERRUPTION_RATE,
    PlacementContext,
    Requirements,
    place,
)

NOW = datetime(2026, 5, 20, tzinfo=UTC)

# (a) single-decision requests
SINGLE: list[tuple[str, Requirements]] = [
    ("A100:8", Requirements(gpus=(GpuSpec("A100", 8),))),
    ("H100:1", Requirements(gpus=(GpuSpec("H100", 1),))),
    ("T4:1", Requirements(gpus=(GpuSpec("T4", 1),))),
    ("H100:8", Requirements(gpus=(GpuSpec("H100", 8),))),
    ("any GPU >= 80 GB", Requirements(gpus=(GpuSpec(None, 1, 80.0),))),
]
_SHAPES = [r for _, r in SINGLE] + [
    Requirements(gpus=(GpuSpec("V100", 1),)),
    Requirements(gpus=(GpuSpec("L4", 1),)),
    Requirements(gpus=(GpuSpec("A100-80GB", 8),)),
    Requirements(gpus=(GpuSpec("A10", 1),)),
    Requirements(gpus=(GpuSpec("V100", 8),)),
]
_CLOUDS = [
    frozenset({"aws"}),
    frozenset({"gcp"}),
    frozenset({"azure"}),
    frozenset({"gcp", "azure"}),
]


@dataclass(frozen=True)
class Request:
    req: Requirements
    hours: float


def pending_jobs(n: int, seed: int = 0) -> list[Request]:
    """A mixed queue: shapes from the list above, some pinned to clouds or capped in price."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = _SHAPES[int(rng.integers(len(_SHAPES)))]
        clouds = _CLOUDS[int(rng.integers(len(_CLOUDS)))] if rng.random() < 0.3 else frozenset()
        cap = float(rng.choice([5.0, 20.0, 60.0])) if rng.random() < 0.2 else None
        req = Requirements(gpus=base.gpus, clouds=clouds, max_price_per_hour=cap)
        out.append(Request(req, float(rng.uniform(1, 500))))
    return out


def context(hours: float) -> PlacementContext:
    return PlacementContext(now=NOW, remaining_gpu_hours=hours)


def spotwise_choice(cat: Catalog, r: Request) -> float | None:
    d = place(r.req, cat, context(r.hours))
    return d.expected_cost


class PandasBaseline:
    """The same rules and cost formula as a competent pandas user would write them: the
    DataFrame is grouped by GPU model once, each request filters only its model's rows (all
    rows for "any model") with numpy masks and takes the argmin of the expected cost."""

    def __init__(self, offerings: list[Offering], overhead: float = 0.05) -> None:
        import pandas as pd

        df = pd.DataFrame(
            {
                "cloud": pd.Categorical([o.cloud for o in offerings]),
                "gpu_model": [o.gpu_model.upper() for o in offerings],
                "gpu_count": np.array([o.gpu_count for o in offerings]),
                "gpu_memory_gb": np.array([o.gpu_memory_gb for o in offerings], float),
                "spot": np.array([o.market is Market.SPOT for o in offerings]),
                "price": np.array([o.price_per_hour for o in offerings], float),
            }
        )
        rate = np.where(df["spot"], DEFAULT_SPOT_INTERRUPTION_RATE, 0.0)
        # expected $ per GPU-hour of work: the request's hours only scale it
        df["unit_cost"] = df["price"] / df["gpu_count"].clip(lower=1) * (1.0 + rate * overhead)
        self.df = df
        self._cols = {c: df[c].to_numpy() for c in ("gpu_count", "gpu_memory_gb", "price",
                                                     "unit_cost")}  # fmt: skip
        self._cloud = df["cloud"].cat.codes.to_numpy()
        self._cloud_code = {c: i for i, c in enumerate(df["cloud"].cat.categories)}
        self._by_model = {m: np.asarray(ix) for m, ix in df.groupby("gpu_model").indices.items()}
        self._all = np.arange(len(df))

    def choice(self, r: Request) -> float | None:
        c = self._cols
        picks = []
        for spec in r.req.gpus:
            rows = self._all if spec.model is None else self._by_model.get(spec.model.upper())
            if rows is None or not len(rows):
                continue
            m = (c["gpu_count"][rows] == spec.count) & (c["gpu_count"][rows] > 0)
            if spec.min_memory_gb:
                m &= c["gpu_memory_gb"][rows] >= spec.min_memory_gb
            picks.append(rows[m])
        if not picks:
            return None
        rows = np.unique(np.concatenate(picks))
        if r.req.clouds:
            codes = [self._cloud_code[x] for x in r.req.clouds if x in self._cloud_code]
            rows = rows[np.isin(self._cloud[rows], codes)]
        if r.req.max_price_per_hour is not None:
            rows = rows[c["price"][rows] <= r.req.max_price_per_hour]
        if not len(rows):
            return None
        return float(c["unit_cost"][rows].min() * r.hours)


def time_per_call(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds per call over `repeat` calls (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-6 * max(1.0, abs(a))
