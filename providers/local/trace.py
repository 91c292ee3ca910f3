"""Replay of a real spot trace: per-tick availability and price for a handful of series.

Stdlib only: the supervisor process imports this to watch its own pool.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

TRACE_DIR = Path(__file__).resolve().parent / "data" / "traces"
DEFAULT_TRACE = "aws-v100-2023-02-15"


def available_traces() -> list[str]:
    return sorted(p.name.removesuffix(".json.gz") for p in TRACE_DIR.glob("*.json.gz"))


@dataclass(frozen=True)
class Trace:
    """`available[s][t]` is "1" when series s had spot capacity at tick t (AVAILABLE convention).

    Ticks are unbounded integers; the trace repeats after its last tick.
    """

    name: str
    gap_seconds: float
    start: datetime
    series: tuple[str, ...]
    available: dict[str, str]
    prices: dict[str, tuple[float, ...]]
    mean_price: dict[str, float]

    @property
    def n_ticks(self) -> int:
        return len(self.available[self.series[0]])

    def series_for(self, pool: str) -> str:
        """A pool replays the series of its own zone when traced, else a hash-chosen one."""
        parts = pool.split("/")
        if len(parts) >= 2 and parts[1] in self.available:
            return parts[1]
        h = int.from_bytes(hashlib.sha256(pool.encode()).digest()[:8], "big")
        return self.series[h % len(self.series)]

    def tick(self, offset_seconds: float) -> int:
        return int(offset_seconds // self.gap_seconds)

    def is_available(self, series: str, tick: int) -> bool:
        return self.available[series][tick % self.n_ticks] == "1"

    def price_factor(self, series: str, tick: int) -> float:
        """Price at this tick relative to the series mean (catalog spot price x factor)."""
        return self.prices[series][tick % self.n_ticks] / self.mean_price[series]

    def next_outage(self, series: str, tick: int) -> int | None:
        """The first tick > `tick` where capacity disappears (1 -> 0 edge), or None if never."""
        s, n = self.available[series], self.n_ticks
        base = (tick // n) * n
        pos = tick - base
        ring = s + s + s[0]
        i = ring.find("10", pos)  # i >= pos: s[i] available, s[i+1] is the outage
        return None if i < 0 else base + i + 1

    def offset_of_tick(self, tick: int) -> float:
        return tick * self.gap_seconds


@cache
def load_trace(name: str) -> Trace:
    path = TRACE_DIR / f"{name}.json.gz"
    with gzip.open(path, "rt") as f:
        raw = json.load(f)
    series = tuple(raw["series"])
    prices = {s: tuple(raw["series"][s]["prices"]) for s in series}
    return Trace(
        name=raw["name"],
        gap_seconds=float(raw["gap_seconds"]),
        start=datetime.fromisoformat(raw["start"]),
        series=series,
        available={s: raw["series"][s]["available"] for s in series},
        prices=prices,
        mean_price={s: sum(p) / len(p) for s, p in prices.items()},
    )
