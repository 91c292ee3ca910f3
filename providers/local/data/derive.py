"""Rebuild the local market's shipped data from the project's shared data folder.

Run from the repository root: `python providers/local/data/derive.py [SHARED_DATA_DIR]`
(default ../shared/data). The runtime never reads the shared folder; only this script does.
Outputs catalog.csv and traces/aws-v100-2023-02-15.json.gz next to this file.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for providers.gpus
from providers.gpus import canonical  # noqa: E402

ZONES = [
    "us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f",
    "us-east-2a", "us-east-2b", "us-west-2a", "us-west-2b", "us-west-2c",
]  # fmt: skip
TRACE_NAME = "aws-v100-2023-02-15"
# p3.2xlarge shape and on-demand price (facts; the trace's own price_info gives 3.06 $/h).
P3_2XLARGE = {"gpu": "V100", "count": 1, "vcpus": 8, "memory": 61, "price": 3.06}

AWS_PICK = {
    # instance type -> regions kept (every AZ of the catalog in those regions)
    "p4d.24xlarge": {"us-east-1", "us-west-2"},
    "p5.48xlarge": {"us-east-1", "us-west-2"},
    "p3dn.24xlarge": {"us-east-1"},
}
# GCP host VM -> GPUs attached (A2/A3/G2 rows in the mirror carry the GPU price in a separate
# accelerator row with an empty InstanceType; the offering price is host + GPUs).
GCP_PICK = {
    "a2-highgpu-1g": ("A100", 1),
    "a2-highgpu-4g": ("A100", 4),
    "a2-highgpu-8g": ("A100", 8),
    "a3-highgpu-8g": ("H100", 8),
    "g2-standard-4": ("L4", 1),
    "g2-standard-48": ("L4", 4),
    "n1-standard-8": ("T4", 1),
}
GCP_ZONES = {"us-central1-a", "us-east1-c", "europe-west4-a"}
AZURE_PICK = {
    "Standard_NC6s_v3", "Standard_NC24s_v3", "Standard_NC24ads_A100_v4",
    "Standard_ND96asr_v4", "Standard_NC4as_T4_v3", "Standard_NV36ads_A10_v5",
    "Standard_ND96isr_H100_v5",
}  # fmt: skip
AZURE_REGIONS = {"eastus", "westus2"}
COLUMNS = [
    "cloud", "region", "zone", "instance_type", "gpu_model", "gpu_count", "gpu_memory_gb",
    "vcpus", "memory_gb", "price", "spot_price",
]  # fmt: skip


def aws_zone_name(region: str, az_id: str) -> str:
    """AZ IDs (use1-az4) map to names per account; we use azN -> N-th letter for display.

    A Local Zone ID (use1-atl2-az1: Atlanta, in us-east-1) keeps its own name
    (us-east-1-atl-2a), never its parent region's first zone: its prices are its own.
    """
    prefix, n = az_id.rsplit("-az", 1)
    letter = "abcdefgh"[int(n) - 1]
    parts = prefix.split("-")
    if len(parts) == 1:
        return f"{region}{letter}"
    group = parts[1]  # 'atl2' -> 'atl-2'
    i = len(group.rstrip("0123456789"))
    return f"{region}-{group[:i]}-{group[i:]}{letter}"


def gpu(name: str, memory_gb: float | None = None) -> tuple[str, float]:
    """The canonical (model, GB per GPU) of a catalog's accelerator name (providers.gpus)."""
    found = canonical(name, memory_gb)
    if found is None:
        raise SystemExit(f"unknown GPU {name!r}: add it to providers/gpus.py")
    model, mem = found
    return model, int(mem) if mem == int(mem) else mem  # type: ignore[return-value]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def catalog_rows(shared: Path, trace_means: dict[str, float]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for zone in ZONES:  # the traced pools themselves, priced at the trace's mean
        p = P3_2XLARGE
        rows.append(
            dict(cloud="aws", region=zone[:-1], zone=zone, instance_type="p3.2xlarge",
                 gpu_model=p["gpu"], gpu_count=p["count"], gpu_memory_gb=16, vcpus=p["vcpus"],
                 memory_gb=p["memory"], price=p["price"], spot_price=round(trace_means[zone], 4))
        )  # fmt: skip
    for r in read_csv(shared / "catalog" / "aws_vms.csv"):
        if r["Region"] not in AWS_PICK.get(r["InstanceType"], ()) or not r["SpotPrice"]:
            continue
        model, mem = gpu(r["AcceleratorName"])
        rows.append(
            dict(cloud="aws", region=r["Region"], zone=aws_zone_name(r["Region"],
                 r["AvailabilityZone"]), instance_type=r["InstanceType"], gpu_model=model,
                 gpu_count=int(float(r["AcceleratorCount"])), gpu_memory_gb=mem,
                 vcpus=float(r["vCPUs"]), memory_gb=float(r["MemoryGiB"]),
                 price=float(r["Price"]), spot_price=float(r["SpotPrice"]))
        )  # fmt: skip
    gcp = read_csv(shared / "catalog" / "gcp_vms.csv")
    gpu_price = {
        (r["AcceleratorName"], int(float(r["AcceleratorCount"])), r["AvailabilityZone"]): r
        for r in gcp
        if not r["InstanceType"] and r["AcceleratorName"]
    }
    for r in gcp:
        pick = GCP_PICK.get(r["InstanceType"])
        if not pick or r["AvailabilityZone"] not in GCP_ZONES or not r["SpotPrice"]:
            continue
        g = gpu_price.get((pick[0], pick[1], r["AvailabilityZone"]))
        if g is None or not g["SpotPrice"]:
            continue
        rows.append(
            dict(cloud="gcp", region=r["Region"], zone=r["AvailabilityZone"],
                 instance_type=r["InstanceType"], gpu_model=gpu(pick[0])[0], gpu_count=pick[1],
                 gpu_memory_gb=gpu(pick[0])[1], vcpus=float(r["vCPUs"]),
                 memory_gb=float(r["MemoryGiB"]),
                 price=round(float(r["Price"]) + float(g["Price"]), 5),
                 spot_price=round(float(r["SpotPrice"]) + float(g["SpotPrice"]), 5))
        )  # fmt: skip
    for r in read_csv(shared / "catalog" / "azure_vms.csv"):
        if r["InstanceType"] not in AZURE_PICK or r["Region"] not in AZURE_REGIONS:
            continue
        if not r["SpotPrice"]:
            continue
        model, mem = gpu(r["AcceleratorName"])
        rows.append(
            dict(cloud="azure", region=r["Region"], zone=r["Region"],
                 instance_type=r["InstanceType"], gpu_model=model,
                 gpu_count=int(float(r["AcceleratorCount"])), gpu_memory_gb=mem,
                 vcpus=float(r["vCPUs"]), memory_gb=float(r["MemoryGiB"]),
                 price=float(r["Price"]), spot_price=float(r["SpotPrice"]))
        )  # fmt: skip
    return rows


def trace(shared: Path) -> dict[str, object]:
    """Availability (1 = available, skynomad *processed* CSV convention) + per-tick prices."""
    base = shared / "traces" / "skynomad-artifact" / "data"
    prices = json.loads((base / "v100_spot_prices.json").read_text())
    series: dict[str, object] = {}
    start = None
    for zone in ZONES:
        rows = read_csv(base / "real/availability/2023-02-15/processed" / f"{zone}_v100_1.csv")
        if start is None:
            start = datetime.fromisoformat(rows[0]["date"]).replace(tzinfo=UTC)
        avail = "".join("1" if int(r["availability"]) > 0 else "0" for r in rows)
        p = [round(x, 4) for x in prices[f"{zone}_v100_1"]]
        assert len(p) == len(avail), (zone, len(p), len(avail))
        series[zone] = {"available": avail, "prices": p}
    assert start is not None
    return {
        "name": TRACE_NAME,
        "source": "andylizf/skynomad-artifact@62b9aaa (Apache-2.0): data/real/availability/"
        "2023-02-15/processed/*_v100_1.csv + data/v100_spot_prices.json",
        "instance_type": "p3.2xlarge",
        "gap_seconds": 195,
        "start": start.isoformat(),
        "series": series,
    }


def main() -> None:
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[3] / "shared" / "data"
    t = trace(shared)
    means = {z: sum(s["prices"]) / len(s["prices"]) for z, s in t["series"].items()}  # type: ignore[index,union-attr]
    out = HERE / "traces" / f"{TRACE_NAME}.json.gz"
    out.parent.mkdir(exist_ok=True)
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(t, separators=(",", ":")).encode())
    rows, seen = [], set()
    for r in catalog_rows(shared, means):  # one row per pool: (cloud, zone, instance type)
        key = (r["cloud"], r["zone"], r["instance_type"])
        if key in seen:
            raise SystemExit(f"duplicate pool {key}: the sources disagree; resolve it here")
        seen.add(key)
        rows.append(r)
    with (HERE / "catalog.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out.name} ({out.stat().st_size} bytes) and catalog.csv ({len(rows)} rows)")


if __name__ == "__main__":
    main()
