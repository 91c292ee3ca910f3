"""Rebuild data/catalog.csv.gz (all three offline catalogs, normalised) from the shared data.

Usage (repo root): python -m scheduler.lab.bench_data.derive /path/to/shared/data/catalog

One row per purchasable shape and location: cloud, region, zone, instance_type, gpu_model,
gpu_count, gpu_memory_gb (per GPU), vcpus, memory_gb, price, spot_price ('' = no spot).
- AWS: rows as they are; AZ IDs (use1-az4) become region + letter (us-east-1d) as elsewhere.
- GCP: attachable-GPU rows (empty InstanceType, priced per GPU bundle) are joined to their
  host VMs in the same zone (A2/A3/A4/G2 hosts: the fixed GPU of the machine type; N1 hosts:
  T4/V100/P100/P4 in the counts and vCPU limits GCP allows); the price is host + GPUs. TPU
  rows are dropped, CPU-only VMs kept.
- Azure: no zones, so zone = region. Fractional-GPU sizes keep their model with 0 GPUs.
- GPU names are canonical (providers.gpus): model family + memory per GPU, so 'A100-80GB' is
  model A100 with 80 GB and 'V100-32GB' is V100 with 32 GB, as in every other catalog.
- AWS Local Zones (use1-atl2-az1) keep their own zone name (us-east-1-atl-2a).
- One row per pool (cloud, zone, instance type): the script stops if two rows would share one.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for providers.gpus
from providers.gpus import canonical  # noqa: E402

COLUMNS = [
    "cloud", "region", "zone", "instance_type", "gpu_model", "gpu_count", "gpu_memory_gb",
    "vcpus", "memory_gb", "price", "spot_price",
]  # fmt: skip
GPU_MEMORY_GB = {
    "V100": 16, "V100-32GB": 32, "A100": 40, "A100-80GB": 80, "H100": 80, "H100-MEGA": 80,
    "H200": 141, "B200": 180, "L4": 24, "T4": 16, "P100": 16, "P4": 8, "A10": 24, "A10G": 24,
    "MI25": 16, "M60": 8, "MI300X": 192, "K80": 12,
}  # fmt: skip
# GCP machine type -> (GPU model, count) for hosts whose GPUs come with the machine type.
GCP_FIXED = [
    (r"a2-highgpu-(\d+)g", "A100"), (r"a2-megagpu-(16)g", "A100"),
    (r"a2-ultragpu-(\d+)g", "A100-80GB"), (r"a3-highgpu-(\d+)g", "H100"),
    (r"a3-edgegpu-(8)g(-nolssd)?", "H100"), (r"a3-megagpu-(8)g", "H100-MEGA"),
    (r"a3-ultragpu-(8)g(-nolssd)?", "H200"), (r"a4-highgpu-(8)g", "B200"),
]  # fmt: skip
GCP_G2_L4 = {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}  # g2-standard-N -> L4s
# N1 hosts: max vCPUs per (GPU, count), per GCP's GPU platform limits.
GCP_N1_MAX_VCPUS = {
    "T4": {1: 48, 2: 48, 4: 96}, "V100": {1: 12, 2: 24, 4: 48, 8: 96},
    "P100": {1: 16, 2: 32, 4: 64}, "P4": {1: 24, 2: 48, 4: 96},
}  # fmt: skip


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _mem_per_gpu(gpu: str, info: str, count: float) -> float:
    if info.startswith("{"):
        try:
            doc = ast.literal_eval(info)
            total = doc.get("TotalGpuMemoryInMiB")
            if total and count:
                return round(total / 1024 / count, 1)
            size = doc["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
            return round(size / 1024, 1)
        except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
            pass
    return float(GPU_MEMORY_GB.get(gpu, 0))


def _row(cloud, region, zone, itype, gpu, count, mem, vcpus, ram, price, spot) -> list:  # type: ignore[no-untyped-def]
    if gpu:
        found = canonical(gpu, mem or None)
        if found is None:
            raise SystemExit(f"unknown GPU {gpu!r}: add it to providers/gpus.py")
        gpu, mem = found
    return [cloud, region, zone, itype, gpu, count, mem, vcpus, ram, price, spot]


def aws_zone_name(region: str, az_id: str) -> str:
    """use1-az4 -> us-east-1d; a Local Zone keeps its own: use1-atl2-az1 -> us-east-1-atl-2a."""
    prefix, n = az_id.rsplit("-az", 1)
    letter = "abcdefghij"[int(n) - 1]
    parts = prefix.split("-")
    if len(parts) == 1:
        return f"{region}{letter}"
    group = parts[1]  # 'atl2' -> 'atl-2'
    i = len(group.rstrip("0123456789"))
    return f"{region}-{group[:i]}-{group[i:]}{letter}"


def aws(src: Path) -> list[list]:
    out = []
    for r in _read(src / "aws_vms.csv"):
        zone = aws_zone_name(r["Region"], r["AvailabilityZone"])
        count = float(r["AcceleratorCount"] or 0)
        gpu = r["AcceleratorName"]
        out.append(_row("aws", r["Region"], zone, r["InstanceType"], gpu, int(count),
                        _mem_per_gpu(gpu, r["GpuInfo"], count), float(r["vCPUs"]),
                        float(r["MemoryGiB"]), float(r["Price"]), r["SpotPrice"]))  # fmt: skip
    return out


def gcp(src: Path) -> list[list]:
    rows = _read(src / "gcp_vms.csv")
    gpus: dict[tuple[str, str, int], dict[str, str]] = {}
    for r in rows:
        if not r["InstanceType"] and r["AcceleratorName"]:
            gpus[(r["AvailabilityZone"], r["AcceleratorName"], int(r["AcceleratorCount"]))] = r
    out = []
    for r in rows:
        it = r["InstanceType"]
        if not it or not r["Price"]:
            continue
        zone, vcpus = r["AvailabilityZone"], float(r["vCPUs"])
        attach: list[tuple[str, int]] = []
        for pat, model in GCP_FIXED:
            m = re.fullmatch(pat, it)
            if m:
                attach = [(model, int(m.group(1)))]
                break
        else:
            if it.startswith("g2-standard-"):
                attach = [("L4", GCP_G2_L4.get(int(it.rsplit("-", 1)[1]), 1))]
            elif it.startswith("n1-"):
                attach = [
                    (g, c) for g, lim in GCP_N1_MAX_VCPUS.items() for c, vmax in lim.items()
                    if vcpus <= vmax
                ]  # fmt: skip
                out.append(_plain("gcp", r))  # the bare N1 host is an offering too
                if not attach:  # (an N1 host too large for any GPU: listed once, not twice)
                    continue
        if not attach:
            out.append(_plain("gcp", r))
            continue
        for model, count in attach:
            g = gpus.get((zone, model, count))
            if g is None:
                continue
            spot: str | float = ""
            if r["SpotPrice"] and g["SpotPrice"]:
                spot = round(float(r["SpotPrice"]) + float(g["SpotPrice"]), 5)
            name = it if not it.startswith("n1-") else f"{it}+{count}x{model}"
            out.append(_row("gcp", r["Region"], zone, name, model, count,
                            _mem_per_gpu(model, g["GpuInfo"], 1), vcpus, float(r["MemoryGiB"]),
                            round(float(r["Price"]) + float(g["Price"]), 5), spot))  # fmt: skip
    return out


def _plain(cloud: str, r: dict[str, str]) -> list:
    where = (r["Region"], r["AvailabilityZone"], r["InstanceType"])
    size = (float(r["vCPUs"]), float(r["MemoryGiB"]))
    return _row(cloud, *where, "", 0, 0.0, *size, float(r["Price"]), r["SpotPrice"])


def azure(src: Path) -> list[list]:
    out = []
    for r in _read(src / "azure_vms.csv"):
        if not r["Price"]:
            continue
        gpu = r["AcceleratorName"]
        count = float(r["AcceleratorCount"] or 0)
        out.append(_row("azure", r["Region"], r["Region"], r["InstanceType"], gpu, int(count),
                        _mem_per_gpu(gpu, r["GpuInfo"], count) if gpu else 0.0,
                        float(r["vCPUs"]), float(r["MemoryGiB"]), float(r["Price"]),
                        r["SpotPrice"]))  # fmt: skip
    return out


def unique_pools(rows: list[list]) -> list[list]:
    """One row per (cloud, zone, instance type); exact repeats dropped, conflicts are an error."""
    seen: dict[tuple, list] = {}
    for r in rows:
        key = (r[0], r[2], r[3])
        if key in seen and seen[key] != r:
            raise SystemExit(f"two different rows for pool {key}: {seen[key]} / {r}")
        seen.setdefault(key, r)
    return list(seen.values())


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    src = Path(argv[0])
    rows = unique_pools(aws(src) + gcp(src) + azure(src))
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    w.writerows(rows)
    data = gzip.compress(buf.getvalue().encode(), compresslevel=9, mtime=0)  # reproducible
    (HERE / "data" / "catalog.csv.gz").write_bytes(data)
    print(f"{len(rows)} rows", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
