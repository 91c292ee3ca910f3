"""Workload and baseline for `spotwise bench placement`.

The baseline is what one would write without the columnar catalog: a pandas DataFrame of all
offerings, filtered with boolean masks and sorted by the same expected-cost formula.
Both sides must pick an offering of the same expected cost; mismatches are counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from providers.base import Market, Offering
from scheduler.catalog import Catalog
from scheduler.jobspec import GpuSpec
from scheduler.placement import (
    DEFAULT_SPOT_INTERRUPTION_RATE,
    PlacementContext,
    Requirements,
    place,
)

NOW = datetime(2026, 5, 20, tzinfo=UTC)

# (a) the single-decision requests named in the issue
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
    """Filter-and-sort over a DataFrame with the same rules and cost formula."""

    def __init__(self, offerings: list[Offering]) -> None:
        import pandas as pd

        self.df = pd.DataFrame(
            {
                "cloud": pd.Categorical([o.cloud for o in offerings]),
                "region": pd.Categorical([o.region for o in offerings]),
                "zone": pd.Categorical([o.zone for o in offerings]),
                "instance_type": pd.Categorical([o.instance_type for o in offerings]),
                "gpu_model": pd.Categorical([o.gpu_model.upper() for o in offerings]),
                "gpu_count": [o.gpu_count for o in offerings],
                "gpu_memory_gb": [o.gpu_memory_gb for o in offerings],
                "vcpus": [o.vcpus for o in offerings],
                "memory_gb": [o.memory_gb for o in offerings],
                "spot": [o.market is Market.SPOT for o in offerings],
                "price": [o.price_per_hour for o in offerings],
            }
        )

    def choice(self, r: Request, overhead: float = 0.05) -> float | None:
        df = self.df
        mask = np.zeros(len(df), dtype=bool)
        for spec in r.req.gpus:
            m = (df["gpu_count"] == spec.count) & (df["gpu_count"] > 0)
            if spec.model is not None:
                m &= df["gpu_model"] == spec.model.upper()
            if spec.min_memory_gb:
                m &= df["gpu_memory_gb"] >= spec.min_memory_gb
            mask |= m.to_numpy()
        sub = df[mask]
        if r.req.clouds:
            sub = sub[sub["cloud"].isin(r.req.clouds)]
        if r.req.max_price_per_hour is not None:
            sub = sub[sub["price"] <= r.req.max_price_per_hour]
        if sub.empty:
            return None
        rate = np.where(sub["spot"], DEFAULT_SPOT_INTERRUPTION_RATE, 0.0)
        expected = sub["price"] * (r.hours / sub["gpu_count"]) * (1.0 + rate * overhead)
        best = sub.assign(expected=expected).sort_values("expected").iloc[0]
        return float(best["expected"])


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
