"""The shipped catalog snapshot (data/catalog.csv; see data/README.md for its origin)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CATALOG_PATH = Path(__file__).resolve().parent / "data" / "catalog.csv"


@dataclass(frozen=True, slots=True)
class CatalogRow:
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float
    price: float  # on-demand list price, $/h
    spot_price: float  # the snapshot's spot price; the trace moves it around this level


@cache
def load_catalog(path: Path = CATALOG_PATH) -> tuple[CatalogRow, ...]:
    with path.open(newline="") as f:
        return tuple(
            CatalogRow(
                cloud=r["cloud"],
                region=r["region"],
                zone=r["zone"],
                instance_type=r["instance_type"],
                gpu_model=r["gpu_model"],
                gpu_count=int(r["gpu_count"]),
                gpu_memory_gb=float(r["gpu_memory_gb"]),
                vcpus=float(r["vcpus"]),
                memory_gb=float(r["memory_gb"]),
                price=float(r["price"]),
                spot_price=float(r["spot_price"]),
            )
            for r in csv.DictReader(f)
        )
