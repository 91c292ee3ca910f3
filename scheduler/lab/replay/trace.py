"""Availability + price traces as the replay simulator sees them, and the loaders for the
published formats.

Everything is held in the AVAILABLE convention (True = a spot instance can be had at that
tick). Published files differ: spot-traces JSON and the skynomad processed CSVs count
available instances, the Can't-Be-Late simulator files (full.json) store 1 = preempted, and
the raw 2022 probe CSVs store fail = 1. Each loader names the convention it reads.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import numpy as np


class Convention(StrEnum):
    AVAILABLE = "available"  # value > 0: spot obtainable (spot-traces, skynomad CSV)
    PREEMPTED = "preempted"  # value 1: spot NOT obtainable (sky_spot TraceEnv full.json)


def to_available(values: np.ndarray | list[int], convention: Convention) -> np.ndarray:
    arr = np.asarray(values)
    if convention is Convention.AVAILABLE:
        return arr > 0
    return arr == 0


@dataclass(frozen=True)
class Trace:
    """Per-zone spot availability and price on a regular tick grid; on-demand always up."""

    zones: tuple[str, ...]
    gap_hours: float
    available: np.ndarray  # (zones, ticks) bool
    spot_price: np.ndarray  # (zones, ticks) float, $/h
    on_demand_price: float
    regions: tuple[str, ...] = field(default=())
    name: str = ""

    def __post_init__(self) -> None:
        if self.available.shape != self.spot_price.shape or self.available.ndim != 2:
            raise ValueError("available and spot_price must both be (zones, ticks)")
        if len(self.zones) != self.available.shape[0]:
            raise ValueError("one zone name per row")
        if not self.regions:
            object.__setattr__(self, "regions", tuple(region_of(z) for z in self.zones))

    @property
    def n_ticks(self) -> int:
        return int(self.available.shape[1])

    def window(self, start: int, length: int) -> Trace:
        if start < 0 or start + length > self.n_ticks:
            raise ValueError(f"window {start}+{length} outside {self.n_ticks} ticks")
        sl = slice(start, start + length)
        return Trace(
            self.zones,
            self.gap_hours,
            self.available[:, sl],
            self.spot_price[:, sl],
            self.on_demand_price,
            self.regions,
            f"{self.name}@{start}",
        )

    def select(self, zones: list[str] | tuple[str, ...]) -> Trace:
        idx = [self.zones.index(z) for z in zones]
        return Trace(
            tuple(zones),
            self.gap_hours,
            self.available[idx],
            self.spot_price[idx],
            self.on_demand_price,
            tuple(self.regions[i] for i in idx),
            self.name,
        )


def region_of(zone: str) -> str:
    """AWS/GCP-style zone -> region: us-west-2a -> us-west-2, us-central1-a -> us-central1."""
    if zone[-2:-1] == "-":
        return zone[:-2]
    if zone and zone[-1].isalpha() and zone[-2:-1].isdigit():
        return zone[:-1]
    return zone


def single_zone(
    available: list[bool] | np.ndarray,
    gap_hours: float,
    spot_price: float | list[float] | np.ndarray,
    on_demand_price: float,
    zone: str = "z0",
) -> Trace:
    """Handy constructor for tests and hand-made traces."""
    avail = np.asarray(available, dtype=bool)[None, :]
    price = np.broadcast_to(np.asarray(spot_price, dtype=float), avail.shape[1:])[None, :]
    return Trace((zone,), gap_hours, avail, price.copy(), on_demand_price)


# ---- loaders for the published formats ---------------------------------------------------


def load_json_trace(path: Path, convention: Convention) -> tuple[np.ndarray, float, list | None]:
    """spot-traces / sky_spot JSON: {"metadata": {"gap_seconds"}, "data": [...], "prices"?}.

    The caller must say which convention the file uses; gap_seconds is returned as stored
    (it is wrong in some copies, see the data README).
    """
    doc = json.loads(Path(path).read_text())
    avail = to_available(doc["data"], convention)
    return avail, float(doc["metadata"]["gap_seconds"]), doc.get("prices")


def trace_from_json(
    path: Path,
    convention: Convention,
    zone: str,
    on_demand_price: float,
    spot_price: float | None = None,
    gap_seconds: float | None = None,
) -> Trace:
    """A one-zone Trace from a JSON trace file; its own "prices" win over `spot_price`.

    Pass `gap_seconds` when the file's metadata is known to be wrong (e.g. 300 s stored for
    the 195 s 2023 V100 data).
    """
    avail, gap, prices = load_json_trace(path, convention)
    if prices is None:
        if spot_price is None:
            raise ValueError(f"{path}: no per-tick prices in the file; pass spot_price")
        prices = [spot_price] * len(avail)
    gap_h = (gap_seconds or gap) / 3600.0
    return Trace((zone,), gap_h, avail[None, :], np.asarray(prices, float)[None, :],
                 on_demand_price, name=Path(path).stem)  # fmt: skip


def load_fail_csv(path: Path) -> tuple[np.ndarray, list[datetime]]:
    """Raw 2022 probe CSV (no header): tick, ISO time, fail (1 = launch failed)."""
    fails, times = [], []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            times.append(datetime.fromisoformat(row[1].strip().replace("Z", "+00:00")))
            fails.append(int(row[2]))
    return np.asarray(fails) == 0, times


def load_availability_csv(path: Path) -> tuple[np.ndarray, list[datetime]]:
    """skynomad processed CSV with header "date,availability" (1 = available)."""
    avail, times = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            times.append(datetime.fromisoformat(row["date"]))
            avail.append(int(row["availability"]))
    return np.asarray(avail) > 0, times


def gap_hours_from_times(times: list[datetime]) -> float:
    """The tick length measured from timestamps (the first step, as skynomad does)."""
    return (times[1] - times[0]).total_seconds() / 3600.0


def gang_trace(trace: Trace, nodes: int, seed: int = 0) -> Trace:
    """The trace a gang of `nodes` instances in one pool sees, so every policy, the simulator
    and the optimal DP replay gangs unchanged: it pays N x every price, and besides the pool
    losing capacity (all nodes at once) each of the other N - 1 nodes is taken back on its
    own at the pool's observed rate (outages per available hour), a tick of unavailability
    each. The gang's interruption rate is thus about N x a node's (placement.gang_rate)."""
    if nodes <= 1:
        return trace
    priced, losses = gang_losses(trace, nodes, seed)
    return Trace(
        priced.zones, priced.gap_hours, priced.available & ~losses, priced.spot_price,
        priced.on_demand_price, priced.regions, priced.name,
    )  # fmt: skip


def gang_losses(trace: Trace, nodes: int, seed: int = 0) -> tuple[Trace, np.ndarray]:
    """The gang's trace before its single-node losses (N x every price, the pool's own
    availability), and those losses (zones x ticks: a node of a gang running there is taken
    back on its own). gang_trace makes each one a tick without capacity, where the gang is
    re-placed whole; the replay of the replace-one path (sim.simulate's `node_losses`)
    replaces that node in place instead. The same draws for both."""
    import numpy as np

    rng = np.random.default_rng(seed)
    losses = np.zeros_like(trace.available, dtype=bool)
    g = trace.gap_hours
    for z in range(trace.available.shape[0]):
        row = trace.available[z].astype(bool)
        up_hours = max(g, float(row.sum()) * g)
        lost = int(np.count_nonzero(row[:-1] & ~row[1:]))
        p = min(1.0, lost / up_hours * g)
        for _ in range(nodes - 1):
            losses[z] |= row & (rng.random(row.shape[0]) < p)
    priced = Trace(
        trace.zones,
        g,
        trace.available.copy(),
        trace.spot_price * nodes,
        trace.on_demand_price * nodes,
        trace.regions,
        f"{trace.name} x{nodes} nodes",
    )
    return priced, losses
