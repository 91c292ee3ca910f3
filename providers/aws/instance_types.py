"""What EC2 sells: GPU instance types, the zones offering them, and current spot prices.

Pure parsing is kept apart from the paged calls so the quirks (GPU memory units, product
descriptions, AWS vs. moto paging) are testable without a server.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from providers.gpus import MODELS, canonical

log = logging.getLogger("spotwise.providers.aws")

# Spot rows for Linux come as "Linux/UNIX" and, for VPC launches, "Linux/UNIX (Amazon VPC)"
# (moto only ever returns the latter). Both are the Linux price; any other OS is ignored.
LINUX_PRODUCTS = ("Linux/UNIX (Amazon VPC)", "Linux/UNIX")

# Filter value lists are kept short: EC2 caps values per filter and request sizes.
CHUNK = 50


@dataclass(frozen=True, slots=True)
class GpuType:
    instance_type: str
    gpu_model: str  # canonical (providers.gpus): "A100", never EC2's spelling
    gpu_count: int
    gpu_memory_gb: float  # per GPU
    vcpus: float
    memory_gb: float
    spot: bool  # SupportedUsageClasses says so
    on_demand: bool


def canonical_gpu(name: str, memory_gb: float | None) -> tuple[str, float] | None:
    """providers.gpus.canonical, except that an EC2 name that *is* a model name wins:
    canonical() reads the "10G" of "A10G" (and "4G" of "T4g") as a memory size."""
    exact = next((m for m in MODELS if m.name == "".join(name.split()).upper()), None)
    if exact is None:
        return canonical(name, memory_gb)
    if not memory_gb:
        return exact.name, exact.memory_gb[0]
    best = min(exact.memory_gb, key=lambda v: abs(v - memory_gb))
    return exact.name, best if abs(best - memory_gb) <= max(2.0, 0.1 * best) else memory_gb


def gpu_memory_gb(mib: int) -> float:
    """GPU memory as sold: whole GiB when AWS reports whole GiB, else decimal GB.

    AWS reports A100 as 40960 MiB (40 GiB) but A10G/L4 as 22888 MiB, which is 24.0 decimal GB,
    the figure on the data sheet and the one a job asks for.
    """
    if mib % 1024 == 0:
        return float(mib // 1024)
    return round(mib * 1.048576 / 1000, 1)


def parse_instance_type(info: dict[str, Any], architectures: Sequence[str]) -> GpuType | None:
    """A GPU type we can launch, or None (no GPU, fractional GPU, wrong CPU architecture, or
    a GPU no job can name: providers.gpus does not know it)."""
    gpu_info = info.get("GpuInfo") or {}
    gpus = gpu_info.get("Gpus") or []
    if not gpus:
        return None
    archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures") or ["x86_64"]
    if architectures and not set(archs) & set(architectures):
        return None
    first = gpus[0]
    count = sum(int(g.get("Count") or 0) for g in gpus)
    if count < 1:  # fractional GPU types (g6f) report Count 0
        return None
    mem = int(first.get("MemoryInfo", {}).get("SizeInMiB") or 0)
    if not mem and gpu_info.get("TotalGpuMemoryInMiB"):
        mem = int(gpu_info["TotalGpuMemoryInMiB"]) // count
    classes = info.get("SupportedUsageClasses") or ["on-demand", "spot"]
    # EC2 says "A100" for both the 40 and 80 GB parts: the memory tells them apart.
    named = canonical_gpu(str(first.get("Name", "")), gpu_memory_gb(mem) if mem else None)
    if named is None:
        log.info("aws: %s has a GPU spotwise cannot name (%r); not offered",
                 info.get("InstanceType"), first.get("Name"))  # fmt: skip
        return None
    return GpuType(
        instance_type=info["InstanceType"],
        gpu_model=named[0],
        gpu_count=count,
        gpu_memory_gb=named[1],
        vcpus=float(info.get("VCpuInfo", {}).get("DefaultVCpus") or 0),
        memory_gb=round(int(info.get("MemoryInfo", {}).get("SizeInMiB") or 0) / 1024, 2),
        spot="spot" in classes,
        on_demand="on-demand" in classes,
    )


def allowed(instance_type: str, patterns: Sequence[str]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(instance_type, p) for p in patterns)


def chunks(items: Sequence[str], size: int = CHUNK) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def fetch_gpu_types(
    ec2: Any, patterns: Sequence[str], architectures: Sequence[str]
) -> dict[str, GpuType]:
    """Page through every instance type (there is no GPU filter) and keep the GPU ones."""
    kwargs: dict[str, Any] = {}
    if patterns:  # the instance-type filter takes wildcards, which cuts the pages needed
        kwargs["Filters"] = [{"Name": "instance-type", "Values": list(patterns)}]
    out: dict[str, GpuType] = {}
    for page in ec2.get_paginator("describe_instance_types").paginate(**kwargs):
        for info in page.get("InstanceTypes", []):
            t = parse_instance_type(info, architectures)
            if t and allowed(t.instance_type, patterns):
                out[t.instance_type] = t
    return out


def fetch_zones(ec2: Any, instance_types: Sequence[str]) -> dict[str, list[str]]:
    """instance type -> the availability zones of this region that offer it."""
    zones: dict[str, set[str]] = {}
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    for chunk in chunks(sorted(instance_types)):
        pages = paginator.paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": chunk}],
        )
        for page in pages:
            for o in page.get("InstanceTypeOfferings", []):
                if o.get("InstanceType") in instance_types:
                    zones.setdefault(o["InstanceType"], set()).add(o["Location"])
    return {t: sorted(z) for t, z in zones.items()}


def fetch_spot_prices(
    ec2: Any, instance_types: Sequence[str], now: datetime
) -> dict[tuple[str, str], float]:
    """(zone, instance type) -> current Linux spot price.

    `StartTime=now` makes AWS return the price in effect now (the last change before it).
    The OS is narrowed with the ProductDescriptions parameter rather than the
    `product-description` filter, and re-checked here, because moto ignores the parameter
    and answers the filter with nothing.
    """
    rows: list[dict[str, Any]] = []
    paginator = ec2.get_paginator("describe_spot_price_history")
    for chunk in chunks(sorted(instance_types)):
        pages = paginator.paginate(
            InstanceTypes=chunk,
            ProductDescriptions=list(LINUX_PRODUCTS),
            StartTime=now,
            PaginationConfig={"PageSize": 1000},
        )
        for page in pages:
            rows.extend(page.get("SpotPriceHistory", []))
    return latest_linux_prices(rows)


def latest_linux_prices(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Keep Linux rows only; per (zone, type) the newest, VPC row first on a tie."""
    rank = {p: i for i, p in enumerate(LINUX_PRODUCTS)}
    best: dict[tuple[str, str], tuple[Any, int, float]] = {}
    for r in rows:
        product = r.get("ProductDescription", "")
        if product not in rank:
            continue
        try:
            price = float(r["SpotPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        if price <= 0:
            continue
        key = (r["AvailabilityZone"], r["InstanceType"])
        stamp = r.get("Timestamp")
        stamp_key = stamp.timestamp() if isinstance(stamp, datetime) else 0.0
        cand = (stamp_key, -rank[product], price)
        if key not in best or cand[:2] > best[key][:2]:
            best[key] = cand
    return {k: v[2] for k, v in best.items()}
