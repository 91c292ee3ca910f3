"""GPU VM sizes from Resource SKUs: the GPU model from the size family, count and shape from
the SKU's capabilities, zones minus what restrictions remove. Pure functions."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from providers import gpus

# Resource SKUs carry only a GPU count; the model (and its memory) comes from the family,
# read off the size name ("Standard_" dropped). Sizes that are a fraction of a GPU
# (NVads_A10_v5 below 36 vCPUs, NVv4) are left out.
FAMILIES: tuple[tuple[re.Pattern[str], str, float], ...] = tuple(
    (re.compile(p), model, mem)
    for p, model, mem in (
        (r"^NC\d+as_T4_v3$", "T4", 16.0),  # NCasT4_v3
        (r"^NC\d+ads_A100_v4$", "A100", 80.0),  # NC_A100_v4 (NCads_A100_v4)
        (r"^ND\d+asr_v4$", "A100", 40.0),  # NDasr_A100_v4 (ND96asr_v4)
        (r"^ND\d+amsr_A100_v4$", "A100", 80.0),  # NDm_A100_v4
        (r"^NC\d+r?s_v3$", "V100", 16.0),  # NCv3
        (r"^ND\d+rs_v2$", "V100", 32.0),  # NDv2
        (r"^ND\d+isr?_H100_v5$", "H100", 80.0),  # NDv5 H100 (ND96isr and ND96is)
        (r"^NCC?\d+adi?s_H100_v5$", "H100", 94.0),  # NC H100 v5 (H100 NVL), NCC confidential
        (r"^ND\d+isr?_H200_v5$", "H200", 141.0),  # NDv5 H200
        (r"^ND\d+isr?_MI300X_v5$", "MI300X", 192.0),  # ND96is_MI300X_v5
        (r"^NC\d+ads_A10_v4$", "A10", 24.0),
        (r"^NV(?:36|72)adm?s_A10_v5$", "A10", 24.0),  # NV36ads, NV36adms, NV72ads
        (r"^NV\d+s_v3$", "M60", 8.0),
    )
)


# GPU sizes whose resource SKU carries no `GPUs` capability at all: the count comes from
# Azure's size documentation, as SkyPilot's fetch_azure.py AZURE_MISSING_GPU_COUNT records
# ("observed 2026-09-02 via az vm list-skus --all"). The GB200/GB300 sizes are Grace (arm64)
# machines whose GPUs providers.gpus does not name, so only MI300X is offered of these.
MISSING_GPU_COUNT = {
    "Standard_ND128isr_NDR_GB200_v6": 4,
    "Standard_ND128isr_GB300_v6": 4,
    "Standard_ND96is_MI300X_v5": 8,
}


@dataclass(frozen=True, slots=True)
class GpuSize:
    name: str  # "Standard_NC4as_T4_v3"
    gpu_model: str  # canonical (providers.gpus)
    gpu_count: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float
    spot: bool  # LowPriorityCapable
    zones: tuple[str, ...]  # what is left after Zone restrictions; () = regional only


def gpu_of(size_name: str) -> tuple[str, float] | None:
    """(canonical model, GB per GPU) for a VM size name, or None when it is not a GPU size."""
    short = size_name.removeprefix("Standard_")
    for pattern, model, mem in FAMILIES:
        if pattern.match(short):
            return gpus.canonical(model, mem)
    return None


def _caps(raw: dict[str, Any]) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for c in raw.get("capabilities") or []}


def _num(value: str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0


def parse_sku(raw: dict[str, Any], location: str, allow: list[str]) -> GpuSize | None:
    """One resource SKU (wire form) as a GPU size buyable in `location`, or None."""
    if str(raw.get("resourceType", "")).lower() != "virtualmachines":
        return None
    name = str(raw.get("name", ""))
    if allow and not any(fnmatch.fnmatchcase(name, p) for p in allow):
        return None
    gpu = gpu_of(name)
    caps = _caps(raw)
    count = int(_num(caps.get("GPUs"))) or MISSING_GPU_COUNT.get(name, 0)
    if gpu is None or count < 1:
        return None
    loc = location.lower()
    if loc not in [str(x).lower() for x in raw.get("locations") or [loc]]:
        return None
    zones: set[str] = set()
    for info in raw.get("locationInfo") or []:
        if str(info.get("location", "")).lower() == loc:
            zones.update(str(z) for z in info.get("zones") or [])
    had_zones = bool(zones)
    for r in raw.get("restrictions") or []:
        info = r.get("restrictionInfo") or {}
        where = [str(x).lower() for x in (info.get("locations") or r.get("values") or [])]
        if where and loc not in where:
            continue
        if r.get("type") == "Location":
            return None  # not available to this subscription here at all
        if r.get("type") == "Zone":
            zones -= {str(z) for z in info.get("zones") or []}
    if had_zones and not zones:
        return None
    return GpuSize(
        name=name,
        gpu_model=gpu[0],
        gpu_count=count,
        gpu_memory_gb=gpu[1],
        vcpus=_num(caps.get("vCPUs")),
        memory_gb=_num(caps.get("MemoryGB")),
        spot=caps.get("LowPriorityCapable", "False").lower() == "true",
        zones=tuple(sorted(zones)),
    )
