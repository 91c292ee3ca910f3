"""Data shipped for `spotwise bench placement`: the three offline catalogs, normalised."""

from __future__ import annotations

import csv
import gzip
from datetime import UTC, datetime
from pathlib import Path

from providers.base import Market, Offering

CATALOG = Path(__file__).resolve().parent / "data" / "catalog.csv.gz"
SNAPSHOT = datetime(2026, 5, 20, tzinfo=UTC)  # the mirror commit date (data/README.md)


def catalog_rows() -> list[dict[str, str]]:
    with gzip.open(CATALOG, "rt", newline="") as f:
        return list(csv.DictReader(f))


def offerings(rows: list[dict[str, str]] | None = None) -> list[Offering]:
    """One on-demand offering per row, plus a spot one where the row has a spot price."""
    out: list[Offering] = []
    for r in rows if rows is not None else catalog_rows():
        base = (
            r["cloud"],
            r["region"],
            r["zone"],
            r["instance_type"],
            r["gpu_model"],
            int(r["gpu_count"]),
            float(r["gpu_memory_gb"]),
            float(r["vcpus"]),
            float(r["memory_gb"]),
        )
        out.append(Offering(*base, Market.ON_DEMAND, float(r["price"]), SNAPSHOT))
        if r["spot_price"]:
            out.append(Offering(*base, Market.SPOT, float(r["spot_price"]), SNAPSHOT))
    return out
