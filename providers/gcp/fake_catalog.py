"""Realistic figures for the loopback GCP fake (fake.py): zones, machine types, accelerator
types, image families and Billing Catalog SKUs. The SKUs the A3 series, local SSD and boot
disks are priced from are recorded rows with their sources (fixtures/skus.json); the N1, A2
and G2 figures are us-central1 rows of shared/data/catalog/gcp_vms.csv, decomposed.

Not a server: FakeGcp serves what these return.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

PROJECT = "spotwise-test"
ZONES = ["us-central1-a", "us-central1-b", "europe-west4-a"]

# (name, vCPUs, memory MiB, bundled accelerator, count)
MACHINE_TYPES: dict[str, list[tuple[str, int, int, str, int]]] = {
    "us-central1-a": [
        ("n1-standard-4", 4, 15360, "", 0),
        ("n1-standard-8", 8, 30720, "", 0),
        ("n1-standard-16", 16, 61440, "", 0),
        ("a2-highgpu-1g", 12, 87040, "nvidia-tesla-a100", 1),
        ("a2-ultragpu-1g", 12, 174080, "nvidia-a100-80gb", 1),
        ("g2-standard-4", 4, 16384, "nvidia-l4", 1),
        ("a3-highgpu-8g", 208, 1916928, "nvidia-h100-80gb", 8),
        # A3 Mega: its own accelerator type (gpuhunt's accelerator_details names
        # "nvidia-h100-mega-80gb"), priced from the "H100 80GB Plus/Mega" and "A3Plus" SKUs.
        ("a3-megagpu-8g", 208, 1916928, "nvidia-h100-mega-80gb", 8),
        # A3 Ultra boots only from Hyperdisk (machine_series.BOOT_DISK_TYPES).
        ("a3-ultragpu-8g", 224, 3022848, "nvidia-h200-141gb", 8),
        ("e2-standard-4", 4, 16384, "", 0),
    ],
    "us-central1-b": [
        ("n1-standard-4", 4, 15360, "", 0),
        ("n1-standard-8", 8, 30720, "", 0),
        ("g2-standard-4", 4, 16384, "nvidia-l4", 1),
    ],
    "europe-west4-a": [("n1-standard-4", 4, 15360, "", 0)],
}
ACCELERATORS: dict[str, list[tuple[str, int, str]]] = {
    "us-central1-a": [
        ("nvidia-tesla-t4", 4, "NVIDIA T4"),
        ("nvidia-tesla-v100", 8, "NVIDIA V100"),
        ("nvidia-tesla-a100", 16, "NVIDIA A100 40GB"),
        ("nvidia-a100-80gb", 8, "NVIDIA A100 80GB"),
        ("nvidia-l4", 8, "NVIDIA L4"),
        ("nvidia-h100-80gb", 8, "NVIDIA H100 80GB"),
        ("nvidia-h100-mega-80gb", 8, "NVIDIA H100 80GB MEGA"),
        ("nvidia-h200-141gb", 8, "NVIDIA H200 141GB"),
    ],
    "us-central1-b": [("nvidia-tesla-t4", 4, "NVIDIA T4"), ("nvidia-l4", 8, "NVIDIA L4")],
    "europe-west4-a": [("nvidia-tesla-t4", 4, "NVIDIA T4")],
}

# us-central1 unit prices (USD/h per vCPU, per GiB, per GPU): on-demand, spot.
PRICES = {
    ("core", "N1"): (0.031611, 0.0116),
    ("ram", "N1"): (0.004237, 0.00156),
    ("core", "A2"): (0.031611, 0.0158),
    ("ram", "A2"): (0.004237, 0.00212),
    ("core", "G2"): (0.02499, 0.0105),
    ("ram", "G2"): (0.002927, 0.00123),
    ("gpu", "T4"): (0.35, 0.1654),
    ("gpu", "V100"): (2.48, 1.24),
    ("gpu", "A100"): (2.93391, 1.4341),
    ("gpu", "A100 80GB"): (1.8462, 1.564),
    ("gpu", "L4"): (0.56004, 0.2343),
}
# A3 (High and Mega) GPU, Core and Ram SKUs, local SSD and boot disk SKUs are recorded rows,
# each with its source: fixtures/skus.json.
FIXTURE_SKUS = Path(__file__).with_name("fixtures") / "skus.json"
_GROUP = {"N1": "N1Standard", "A2": "CPU", "G2": "CPU", "A3": "CPU"}
# Deep Learning VM image families (project deeplearning-platform-release) that exist here:
# current families carry a -py310 or -nvidia-5xx suffix (cloud.google.com/deep-learning-vm
# "Choose an image"); the older "common-cu124-debian-11" is not among them.
IMAGE_PROJECT = "deeplearning-platform-release"
IMAGE_FAMILIES = (
    "common-cu128-ubuntu-2204-nvidia-570",
    "common-cu124-ubuntu-2204-py310",
    "pytorch-2-4-cu124-ubuntu-2204-py310",
)
# GCE answers DELETE of a VM that is busy going away with 400 resourceNotReady (the body as
# googleapis/google-api-python-client#485 and opstrace/opstrace#1218 record it).
GOING_AWAY = ("PENDING_STOP", "STOPPING", "DEPROVISIONING")
# zoneOperations.list pages at 500 (maxResults' maximum and default).
OPS_PAGE = 500


def _money(v: float) -> dict[str, Any]:
    units = int(v)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((v - units) * 1e9)}


def sku(
    desc: str, group: str, usage: str, price: float, regions: list[str], *,
    family: str = "Compute", unit: str = "h",
) -> dict[str, Any]:  # fmt: skip
    digest = hashlib.sha256(f"{desc}|{regions}".encode()).hexdigest().upper()
    sid = f"{digest[:4]}-{digest[4:8]}-{digest[8:12]}"
    return {
        "name": f"services/6F81-5844-456A/skus/{sid}",
        "skuId": sid,
        "description": desc,
        "category": {
            "serviceDisplayName": "Compute Engine", "resourceFamily": family,
            "resourceGroup": group, "usageType": usage,
        },
        "serviceRegions": regions,
        "pricingInfo": [{
            "effectiveTime": "2026-11-01T00:00:00Z",
            "pricingExpression": {
                "usageUnit": unit, "usageUnitDescription": "hour", "baseUnit": "s",
                "baseUnitDescription": "second", "baseUnitConversionFactor": 3600,
                "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(price)}],
            },
        }],
        "serviceProviderName": "Google",
    }  # fmt: skip


def fixture_skus() -> list[dict[str, Any]]:
    """The recorded SKU rows of fixtures/skus.json (their sources are beside them there)."""
    doc = json.loads(FIXTURE_SKUS.read_text())
    return [row["sku"] for row in doc["skus"]]


def default_skus() -> list[dict[str, Any]]:
    """Both description formats, plus decoys (commitments, storage, egress, other regions,
    custom and sole-tenant cores, workstation GPUs) that must never be used, and the
    recorded rows of fixtures/skus.json."""
    r = ["us-central1"]
    out = fixture_skus()
    for (kind, what), (od, spot) in PRICES.items():
        if kind == "gpu":
            name = (
                f"Nvidia Tesla {what}"
                if what in ("T4", "V100", "A100", "A100 80GB")
                else (f"Nvidia {what}")
            )
            out.append(sku(f"{name} GPU running in Americas", "GPU", "OnDemand", od, r))
            if what in ("T4", "A100"):  # the older format
                out.append(sku(f"Spot Preemptible {name} GPU running in Americas", "GPU",
                               "Preemptible", spot, r))  # fmt: skip
            else:
                out.append(sku(f"{name} GPU attached to Spot Preemptible VMs running in Iowa",
                               "GPU", "Preemptible", spot, r))  # fmt: skip
        else:
            noun = "Core" if kind == "core" else "Ram"
            unit = "h" if kind == "core" else "GiBy.h"
            group = _GROUP[what] if kind == "core" else "RAM"
            base = (
                f"{what} Predefined Instance {noun}" if what == "N1" else f"{what} Instance {noun}"
            )
            out.append(sku(f"{base} running in Americas", group, "OnDemand", od, r, unit=unit))
            out.append(sku(f"Spot Preemptible {base} running in Americas", group, "Preemptible",
                           spot, r, unit=unit))  # fmt: skip
    out += [
        sku("Commitment v1: A2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", 0.02, r),
        sku(
            "Commitment v1: Nvidia Tesla T4 GPU in Americas for 3 Year", "GPU", "Commit3Yr", 0.1, r
        ),
        sku("Storage PD Capacity", "PDStandard", "OnDemand", 0.04, r, family="Storage"),
        sku(
            "Network Internet Egress from Americas to EMEA",
            "PremiumInternetEgress",
            "OnDemand",
            0.12,
            r,
            family="Network",
        ),
        sku(
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Belgium",
            "GPU",
            "Preemptible",
            0.01,
            ["europe-west1"],
        ),
        sku("Custom Instance Core running in Americas", "N1Standard", "OnDemand", 0.001, r),
        sku("N1 Sole Tenancy Instance Core running in Americas", "CPU", "OnDemand", 0.001, r),
        sku(
            "Nvidia Tesla T4 Virtual Workstation GPU running in Americas",
            "GPU",
            "OnDemand",
            0.001,
            r,
        ),
        sku(
            "Spot Preemptible Nvidia Tesla T4 GPU running in Americas DWS Defined Duration",
            "GPU",
            "Preemptible",
            0.001,
            r,
        ),
    ]
    return out
