"""Realistic figures for the fakes, read from ../shared/data/catalog/azure_vms.csv (with a
built-in fallback): resource SKUs and Retail Prices rows for a few GPU sizes, plus the
recorded westus3 rows of fixtures/ (sizes without a GPUs capability, 'WestUS3' casing, price
rows of every productName variant), each with its source.

Not a server itself: `skus()` is what FakeArm (fake_arm.py) answers the resource SKUs list
with, and `price_rows()` what FakePrices (fake_prices.py) serves; point the SDK at those two
as their docstrings say, and the adapter sees these sizes in LOCATIONS.
"""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path
from typing import Any

LOCATIONS = ("eastus", "westus2")
SIZES = (
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC24ads_A100_v4",
    "Standard_NC6s_v3",
    "Standard_NC40ads_H100_v5",
    "Standard_ND96asr_v4",
    "Standard_ND96isr_H100_v5",
)
# (size, location) -> (vCPUs, MemoryGiB, GPUs, on-demand, spot) when the CSV is missing.
FALLBACK = {
    ("Standard_NC4as_T4_v3", "eastus"): (4, 28, 1, 0.526, 0.204246),
    ("Standard_NC4as_T4_v3", "westus2"): (4, 28, 1, 0.526, 0.15254),
    ("Standard_NC8as_T4_v3", "eastus"): (8, 56, 1, 0.752, 0.292002),
    ("Standard_NC8as_T4_v3", "westus2"): (8, 56, 1, 0.752, 0.21808),
    ("Standard_NC24ads_A100_v4", "eastus"): (24, 220, 1, 3.673, 0.746721),
    ("Standard_NC24ads_A100_v4", "westus2"): (24, 220, 1, 3.673, 1.298406),
    ("Standard_NC6s_v3", "eastus"): (6, 112, 1, 3.06, 0.565488),
    ("Standard_NC6s_v3", "westus2"): (6, 112, 1, 3.06, 0.565488),
    ("Standard_NC40ads_H100_v5", "eastus"): (40, 320, 1, 6.98, 2.192418),
    ("Standard_NC40ads_H100_v5", "westus2"): (40, 320, 1, 6.98, 6.282),
    ("Standard_ND96asr_v4", "eastus"): (96, 900, 8, 27.197, 10.8788),
    ("Standard_ND96asr_v4", "westus2"): (96, 900, 8, 27.197, 10.8788),
    ("Standard_ND96isr_H100_v5", "eastus"): (96, 1900, 8, 98.32, 39.328),
    ("Standard_ND96isr_H100_v5", "westus2"): (96, 1900, 8, 98.32, 39.328),
}
CSV = Path(__file__).resolve().parents[3] / "shared" / "data" / "catalog" / "azure_vms.csv"


FIXTURES = Path(__file__).with_name("fixtures")


def _fixture(name: str) -> dict[str, Any]:
    """Recorded rows (westus3) with their sources: fixtures/resource_skus.json and
    fixtures/price_rows.json."""
    return json.loads((FIXTURES / name).read_text())


@functools.cache
def figures() -> dict[tuple[str, str], tuple[float, float, int, float, float]]:
    out: dict[tuple[str, str], tuple[float, float, int, float, float]] = dict(FALLBACK)
    for path in (CSV, Path("/work/shared/data/catalog/azure_vms.csv")):
        if not path.is_file():
            continue
        with path.open() as f:
            header = f.readline()
            lines = [ln for ln in f if ln.split(",", 1)[0] in SIZES]
            for row in csv.DictReader([header, *lines]):
                key = (row["InstanceType"], row["Region"])
                if key in out and row["Price"] and row["SpotPrice"]:
                    out[key] = (
                        float(row["vCPUs"]), float(row["MemoryGiB"]),
                        int(row["AcceleratorCount"] or 0), float(row["Price"]),
                        float(row["SpotPrice"]),
                    )  # fmt: skip
        break
    return out


def _family(size: str) -> str:
    return size.removeprefix("Standard_").split("_", 1)[-1]


def skus() -> list[dict[str, Any]]:
    """One resource SKU per (size, location), plus the cases restrictions must handle."""
    out = []
    for (size, loc), (vcpus, mem, gpus, _, _) in figures().items():
        caps = {"vCPUs": vcpus, "MemoryGB": mem, "GPUs": gpus, "LowPriorityCapable": True}
        restrictions: list[dict[str, Any]] = []
        zones = ["1", "2", "3"]
        if size == "Standard_NC6s_v3" and loc == "westus2":
            restrictions.append({  # not for this subscription in westus2
                "type": "Location", "values": [loc], "reasonCode": "NotAvailableForSubscription",
                "restrictionInfo": {"locations": [loc]},
            })  # fmt: skip
        if size == "Standard_NC24ads_A100_v4" and loc == "eastus":
            restrictions.append({
                "type": "Zone", "values": [loc], "reasonCode": "NotAvailableForSubscription",
                "restrictionInfo": {"locations": [loc], "zones": ["3"]},
            })  # fmt: skip
        if size == "Standard_ND96isr_H100_v5":
            caps["LowPriorityCapable"] = False
        if size == "Standard_NC40ads_H100_v5":
            zones = []
        out.append({
            "resourceType": "virtualMachines", "name": size, "tier": "Standard",
            "size": size.removeprefix("Standard_"), "family": f"standard{_family(size)}Family",
            "locations": [loc], "locationInfo": [{"location": loc, "zones": zones}],
            "capabilities": [{"name": k, "value": str(v)} for k, v in caps.items()],
            "restrictions": restrictions,
        })  # fmt: skip
    for loc in LOCATIONS:
        out.append({
            "resourceType": "virtualMachines", "name": "Standard_D4s_v5", "locations": [loc],
            "locationInfo": [{"location": loc, "zones": ["1"]}],
            "capabilities": [{"name": "vCPUs", "value": "4"}, {"name": "MemoryGB", "value": "16"}],
        })  # fmt: skip
        out.append({"resourceType": "disks", "name": "Premium_LRS", "locations": [loc]})
    return out + [r["sku"] for r in _fixture("resource_skus.json")["skus"]]


def _row(size: str, loc: str, meter: str, product: str, price: float, type_: str = "Consumption",
         start: str = "2026-06-01T00:00:00Z") -> dict[str, Any]:  # fmt: skip
    return {
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
        "armRegionName": loc, "location": loc, "effectiveStartDate": start,
        "meterId": f"m-{size}-{loc}-{meter}", "meterName": meter,
        "productId": "DZH318Z0BQPS", "skuId": "DZH318Z0BQPS/00TG", "productName": product,
        "skuName": meter, "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": type_,
        "isPrimaryMeterRegion": True, "armSkuName": size,
    }  # fmt: skip


def price_rows() -> list[dict[str, Any]]:
    """Linux and Windows, spot, low priority, on-demand, dev/test and reservation rows."""
    out = []
    for (size, loc), (_, _, _, od, spot) in figures().items():
        short = size.removeprefix("Standard_").replace("_", " ")
        series = f"Virtual Machines {_family(size)} Series"
        out += [
            _row(size, loc, short, series, od),
            _row(size, loc, f"{short} Spot", series, spot),
            _row(size, loc, f"{short} Spot", series, spot * 0.5, start="2024-01-01T00:00:00Z"),
            _row(size, loc, f"{short} Low Priority", series, spot * 0.9),
            _row(size, loc, short, f"{series} Windows", od * 1.4),
            _row(size, loc, f"{short} Spot", f"{series} Windows", spot * 1.7),
            _row(size, loc, f"{short} Spot", f"{series} Win", spot * 0.1),
            _row(size, loc, short, series, od * 0.6, type_="DevTestConsumption"),
            _row(size, loc, short, series, od * 0.4, type_="Reservation"),
        ]
        out[-1]["reservationTerm"] = "1 Year"
    out.append(_row("Standard_D4s_v5", "eastus", "D4s v5", "Virtual Machines Dsv5 Series", 0.192))
    return out + [r["row"] for r in _fixture("price_rows.json")["rows"]]
