"""The GCE catalogue and the Billing Catalog, read into plain values; the price composition.

Machine types and accelerator types come from the aggregated lists (every zone, paged). A VM
price is composed from SKUs: GPU SKU x count + the family's Core SKU x vCPUs + its Ram SKU x
GiB. SKUs are matched on category fields (resource_family, resource_group, usage_type), the
region's membership in service_regions and tokens of the description - never one exact
description format (Google uses at least two: "Spot Preemptible Nvidia Tesla T4 GPU running
in Americas" and "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Iowa").
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from providers import gpus
from providers.base import Market
from providers.gcp.machine_series import local_ssd_gib, price_family

BILLING_SERVICE = "services/6F81-5844-456A"  # Compute Engine
# Families whose VMs we price: N1 (GPUs attached) and the accelerator-optimised ones, by
# the word their Core and Ram SKUs carry (A3 Mega's are "A3Plus Instance Core/Ram").
FAMILIES = ("N1", "A2", "A3", "A3PLUS", "A3ULTRA", "G2")
# GCP bills disks per GiB-month of 730 hours (Compute Engine pricing; gpuhunt's
# `hours_in_month = 730` for the same conversion).
HOURS_PER_MONTH = 730.0
# Storage SKUs we add to a VM's price, by how their description starts (real descriptions
# as peers match them: infracost's google_compute_instance "SSD backed Local Storage( in .*)?"
# and "... attached to (Spot )?Preemptible VMs", gpuhunt's "ssd backed local storage", and
# "Balanced PD Capacity in <place>" / "SSD backed PD Capacity" / "Storage PD Capacity" /
# "Hyperdisk Balanced Capacity" in recorded Billing Catalog reads).
_STORAGE = (
    (re.compile(r"^SSD backed Local Storage\b", re.I), "local-ssd"),
    (re.compile(r"^Balanced PD Capacity\b", re.I), "pd-balanced"),
    (re.compile(r"^SSD backed PD Capacity\b", re.I), "pd-ssd"),
    (re.compile(r"^Storage PD Capacity\b", re.I), "pd-standard"),
    (re.compile(r"^Hyperdisk Balanced Capacity\b", re.I), "hyperdisk-balanced"),
)
MACHINE_FILTER = 'name eq "(n1|a2|a3|g2)-.*"'

# GPUs N1 accepts, with the counts GCE allows and the most vCPUs each count allows
# (cloud.google.com/compute/docs/gpus, "GPU models" tables for N1).
N1_GPUS: dict[str, dict[int, int]] = {
    "nvidia-tesla-t4": {1: 48, 2: 48, 4: 96},
    "nvidia-tesla-v100": {1: 12, 2: 24, 4: 48, 8: 96},
    "nvidia-tesla-p100": {1: 16, 2: 32, 4: 96},
    "nvidia-tesla-p4": {1: 24, 2: 48, 4: 96},
}
# The memory limits (GB) of those shapes.
N1_MAX_MEMORY: dict[str, dict[int, float]] = {
    "nvidia-tesla-t4": {1: 312, 2: 312, 4: 624},
    "nvidia-tesla-v100": {1: 78, 2: 156, 4: 312, 8: 624},
    "nvidia-tesla-p100": {1: 104, 2: 208, 4: 624},
    "nvidia-tesla-p4": {1: 156, 2: 312, 4: 624},
}

# Words that mark SKUs we never compose into a VM price.
_IGNORED = frozenset(
    [
        "COMMITMENT",
        "COMMITTED",
        "COMMIT",
        "CUD",
        "RESERVATION",
        "RESERVED",
        "STORAGE",
        "DISK",
        "PD",
        "SSD",
        "EGRESS",
        "NETWORK",
        "INTERNET",
        "SOLE",
        "TENANCY",
        "TENANT",
        "CUSTOM",
        "EXTENDED",
        "LICENSE",
        "LICENSING",
        "WORKSTATION",
        "VWS",
        "DWS",
        "CALENDAR",
        "FLEX",
        "DEFINED",
        "DURATION",
        "PREMIUM",
        "SNAPSHOT",
        "IMAGE",
    ]
)
_USAGE = {"OnDemand": Market.ON_DEMAND, "Preemptible": Market.SPOT}
_GPU_MODELS = {m.name for m in gpus.MODELS}
_MEM_TOKEN = re.compile(r"^(\d+)GB$")


@dataclass(frozen=True, slots=True)
class MachineType:
    name: str
    zone: str
    vcpus: int
    memory_gb: float  # GiB, as billed
    accelerator: str = ""  # bundled GPUs (A2/A3/G2): accelerator type name
    accelerator_count: int = 0

    @property
    def family(self) -> str:
        """The family word of this machine's Core and Ram SKUs ('A3PLUS' for a3-megagpu)."""
        return price_family(self.name)


@dataclass(frozen=True, slots=True)
class AcceleratorType:
    name: str  # "nvidia-tesla-t4"
    zone: str
    max_cards: int
    description: str = ""


@dataclass(frozen=True, slots=True)
class Shape:
    """One sellable shape: a machine type with the GPUs it carries or gets attached."""

    machine: MachineType
    accelerator: str
    count: int

    @property
    def name(self) -> str:
        if self.machine.accelerator:  # bundled: the machine type is the whole shape
            return self.machine.name
        return shape_name(self.machine.name, self.accelerator, self.count)


def shape_name(machine: str, accelerator: str, count: int) -> str:
    """'n1-standard-8' + 2 x T4 -> 'n1-standard-8+2xnvidia-tesla-t4' (no '/': pools use it)."""
    return f"{machine}+{count}x{accelerator}"


_SHAPE = re.compile(r"^(?P<m>[a-z0-9-]+)\+(?P<n>\d+)x(?P<a>[a-z0-9-]+)$")


def parse_shape(instance_type: str) -> tuple[str, str, int]:
    """(machine type, attached accelerator or "", count) of an offering's instance_type."""
    m = _SHAPE.match(instance_type)
    if not m:
        return instance_type, "", 0
    return m.group("m"), m.group("a"), int(m.group("n"))


# ------------------------------------------------------------------------- GPU identity


@dataclass(frozen=True, slots=True)
class GpuKey:
    model: str  # canonical (providers.gpus)
    memory_gb: float
    variant: str = ""  # "MEGA": a3-megagpu's H100s are their own SKU

    @property
    def label(self) -> str:
        return f"{self.model} {self.memory_gb:g}GB{' ' + self.variant if self.variant else ''}"


def gpu_key_from_tokens(tokens: Iterable[str]) -> GpuKey | None:
    """The GPU a list of upper-case words names: a known model word, an optional '80GB'."""
    toks = list(tokens)
    model = next((t for t in toks if t in _GPU_MODELS), None)
    if model is None:
        return None
    mem = next((float(m.group(1)) for t in toks if (m := _MEM_TOKEN.match(t))), None)
    hit = gpus.canonical(model, mem)
    if hit is None:
        return None
    if mem is None:  # no memory word: the model's first (base) variant
        mem_gb = next(m for m in gpus.MODELS if m.name == hit[0]).memory_gb[0]
    else:
        mem_gb = hit[1]
    # a3-megagpu's H100s ("nvidia-h100-mega-80gb") are their own SKU, spelled "H100 80GB
    # Mega", "H100 Mega 80GB" or "H100 80GB Plus" by region (SkyPilot's fetch_gcp.py;
    # gpuhunt maps "nvidia-h100-80gb-plus" and "-mega" to the same GPU).
    return GpuKey(hit[0], mem_gb, "MEGA" if {"MEGA", "PLUS"} & set(toks) else "")


def accelerator_key(name: str) -> GpuKey | None:
    """'nvidia-tesla-a100' -> A100 40GB; 'nvidia-a100-80gb' -> A100 80GB."""
    return gpu_key_from_tokens(name.upper().split("-"))


# ------------------------------------------------------------------------- SKUs


@dataclass(frozen=True, slots=True)
class Sku:
    kind: str  # "gpu", "core", "ram"
    family: str  # N1/A2/A3/G2 for core/ram; "" for GPUs
    gpu: GpuKey | None
    market: Market
    regions: frozenset[str]
    price: float  # USD per hour (per GPU, per vCPU, per GiB)
    description: str
    sku_id: str = ""


def _tokens(description: str) -> list[str]:
    return re.findall(r"[A-Z0-9]+", description.upper())


def _unit_price(sku: Any, units: tuple[str, ...] = ("h", "GiBy.h")) -> float | None:
    infos = list(sku.pricing_info or [])
    if not infos:
        return None
    expr = infos[-1].pricing_expression
    unit = (expr.usage_unit or "").strip()
    if unit not in units:
        return None
    rates = sorted(expr.tiered_rates or [], key=lambda r: r.start_usage_amount)
    if not rates:
        return None
    money = rates[0].unit_price
    if money.currency_code and money.currency_code != "USD":
        return None
    return float(money.units or 0) + float(money.nanos or 0) / 1e9


def _storage_sku(sku: Any) -> Sku | None:
    """A local SSD or boot disk capacity SKU, priced per GiB-hour."""
    text = str(sku.description or "")
    kind = next((k for pattern, k in _STORAGE if pattern.match(text)), None)
    if kind is None:
        return None
    infos = list(sku.pricing_info or [])
    if not infos:
        return None
    unit = (infos[-1].pricing_expression.usage_unit or "").strip()
    per = {"GiBy.mo": HOURS_PER_MONTH, "GiBy.h": 1.0}.get(unit)
    price = _unit_price(sku, units=("GiBy.mo", "GiBy.h"))
    if per is None or price is None:
        return None
    # Spot local SSD is its own SKU ("... attached to Spot Preemptible VMs"), which Google
    # files under usage type OnDemand: the description decides. Disks are one price.
    market = Market.SPOT if "preemptible" in text.lower() else Market.ON_DEMAND
    regions = frozenset(sku.service_regions or [])
    return Sku(kind, "", None, market, regions, price / per, text, sku.sku_id)


def parse_sku(sku: Any) -> Sku | None:
    """A Core, Ram, GPU, local SSD or disk SKU we compose prices from, or None."""
    cat = sku.category
    if cat.resource_family == "Storage":
        return _storage_sku(sku)
    if cat.resource_family != "Compute":
        return None
    market = _USAGE.get(cat.usage_type)
    if market is None:  # Commit1Yr, Commit3Yr, ...
        return None
    toks = _tokens(sku.description)
    if _IGNORED.intersection(toks):
        return None
    # The category and the description must agree on the market (a contradiction is a SKU
    # we do not understand, not a price to guess at).
    if (market is Market.SPOT) != bool({"PREEMPTIBLE", "SPOT"} & set(toks)):
        return None
    price = _unit_price(sku)
    if price is None:
        return None
    regions = frozenset(sku.service_regions or [])
    if cat.resource_group == "GPU" or "GPU" in toks:
        key = gpu_key_from_tokens(toks)
        if key is None:
            return None
        return Sku("gpu", "", key, market, regions, price, sku.description, sku.sku_id)
    kind = "core" if "CORE" in toks else "ram" if "RAM" in toks else ""
    family = next((f for f in FAMILIES if f in toks), "")
    if not kind or not family:
        return None
    return Sku(kind, family, None, market, regions, price, sku.description, sku.sku_id)


class PriceBook:
    """Per-region unit prices: (region, market, kind, family-or-gpu) -> USD/h."""

    def __init__(self, skus: Iterable[Sku]) -> None:
        self._p: dict[tuple[str, Market, str, Any], Sku] = {}
        for s in skus:
            what = s.gpu if s.kind == "gpu" else s.family
            for region in s.regions:
                key = (region, s.market, s.kind, what)
                # Region-specific SKUs win over multi-region ones; then the first one seen.
                old = self._p.get(key)
                if old is None or len(s.regions) < len(old.regions):
                    self._p[key] = s

    def __len__(self) -> int:
        return len(self._p)

    def unit(self, region: str, market: Market, kind: str, what: Any) -> float | None:
        s = self._p.get((region, market, kind, what))
        return s.price if s else None

    def machine(self, region: str, shape: Shape, market: Market) -> float | None:
        """GPU x count + Core x vCPU + Ram x GiB, or None when any part has no SKU."""
        m = shape.machine
        core = self.unit(region, market, "core", m.family)
        ram = self.unit(region, market, "ram", m.family)
        key = accelerator_key(shape.accelerator)
        gpu = self.unit(region, market, "gpu", key) if key else None
        if core is None or ram is None or gpu is None:
            return None
        return gpu * shape.count + core * m.vcpus + ram * m.memory_gb

    def local_ssd(self, region: str, shape: Shape, market: Market) -> float | None:
        """The bundled local SSD's price per hour (0 without one); None without its SKU.
        A Spot VM's local SSD has its own SKU; the on-demand one stands in without it."""
        gib = local_ssd_gib(shape.machine.name)
        if not gib:
            return 0.0
        unit = self.unit(region, market, "local-ssd", "")
        if unit is None:
            unit = self.unit(region, Market.ON_DEMAND, "local-ssd", "")
        return None if unit is None else unit * gib

    def disk(self, region: str, disk_type: str, size_gb: int) -> float | None:
        """The boot disk's price per hour (one price for Spot and on-demand VMs); None
        without its SKU. Hyperdisk's provisioned IOPS and throughput are not included."""
        unit = self.unit(region, Market.ON_DEMAND, disk_type, "")
        return None if unit is None else unit * size_gb

    def price(
        self, region: str, shape: Shape, market: Market, disk_type: str = "", disk_gb: int = 0
    ) -> float | None:
        """What the VM costs an hour as launched: the machine (GPUs, cores, RAM), its bundled
        local SSD and its boot disk. None when the machine or its local SSD has no SKU; a
        boot disk without a SKU is left out (see missing_parts)."""
        machine = self.machine(region, shape, market)
        ssd = self.local_ssd(region, shape, market)
        if machine is None or ssd is None:
            return None
        disk = self.disk(region, disk_type, disk_gb) if disk_type and disk_gb else 0.0
        return round(machine + ssd + (disk or 0.0), 6)

    def missing_parts(self, region: str, disk_type: str) -> list[str]:
        """What price() had to leave out in `region` (to be said once in an event)."""
        if disk_type and self.unit(region, Market.ON_DEMAND, disk_type, "") is None:
            return [f"the {disk_type} boot disk"]
        return []


# ------------------------------------------------------------------------- fetching


def fetch_skus(client: Any, timeout: float, page_size: int) -> list[Sku]:
    """Every page of the Compute Engine service's SKUs (the pager follows nextPageToken)."""
    from google.cloud import billing_v1

    req = billing_v1.ListSkusRequest(
        parent=BILLING_SERVICE, currency_code="USD", page_size=page_size
    )
    out = []
    for raw in client.list_skus(request=req, timeout=timeout):
        s = parse_sku(raw)
        if s is not None:
            out.append(s)
    return out


def _zone(scope: str) -> str:
    return scope.rsplit("/", 1)[-1]


def fetch_machine_types(
    client: Any, project: str, timeout: float, page_size: int, warn: Any
) -> list[MachineType]:
    from google.cloud import compute_v1

    req = compute_v1.AggregatedListMachineTypesRequest(
        project=project, filter=MACHINE_FILTER, max_results=page_size
    )
    out = []
    for scope, scoped in client.aggregated_list(request=req, timeout=timeout):
        _scope_warning(scope, scoped, warn)
        for mt in scoped.machine_types:
            if mt.deprecated and mt.deprecated.state in ("OBSOLETE", "DELETED"):
                continue
            acc = list(mt.accelerators or [])
            out.append(
                MachineType(
                    name=mt.name,
                    zone=mt.zone or _zone(scope),
                    vcpus=int(mt.guest_cpus),
                    memory_gb=round(mt.memory_mb / 1024, 3),
                    accelerator=acc[0].guest_accelerator_type if acc else "",
                    accelerator_count=int(acc[0].guest_accelerator_count) if acc else 0,
                )
            )
    return out


def fetch_accelerator_types(
    client: Any, project: str, timeout: float, page_size: int, warn: Any
) -> list[AcceleratorType]:
    from google.cloud import compute_v1

    req = compute_v1.AggregatedListAcceleratorTypesRequest(project=project, max_results=page_size)
    out = []
    for scope, scoped in client.aggregated_list(request=req, timeout=timeout):
        _scope_warning(scope, scoped, warn)
        for at in scoped.accelerator_types:
            out.append(
                AcceleratorType(
                    at.name, at.zone.rsplit("/", 1)[-1] or _zone(scope),
                    int(at.maximum_cards_per_instance), at.description,
                )
            )  # fmt: skip
    return out


def _scope_warning(scope: str, scoped: Any, warn: Any) -> None:
    w = getattr(scoped, "warning", None)
    code = getattr(w, "code", "") if w else ""
    if code and code != "NO_RESULTS_ON_PAGE":
        warn(_zone(scope), f"{code}: {getattr(w, 'message', '')}")


def shapes(
    machines: Iterable[MachineType],
    accelerators: Iterable[AcceleratorType],
    allow: list[str],
) -> dict[str, list[Shape]]:
    """Sellable shapes per zone: bundled-GPU types, and N1 types x attachable GPU counts."""
    by_zone: dict[str, dict[str, AcceleratorType]] = {}
    for a in accelerators:
        by_zone.setdefault(a.zone, {})[a.name] = a
    out: dict[str, list[Shape]] = {}
    for m in machines:
        if m.accelerator:
            s = Shape(m, m.accelerator, m.accelerator_count)
            if _allowed(m.name, allow):
                out.setdefault(m.zone, []).append(s)
            continue
        if m.family != "N1" or not _allowed(m.name, allow):
            continue
        for acc, counts in N1_GPUS.items():
            at = by_zone.get(m.zone, {}).get(acc)
            if at is None:
                continue
            for count, max_cpus in counts.items():
                fits = m.vcpus <= max_cpus and m.memory_gb <= N1_MAX_MEMORY[acc][count]
                if count <= at.max_cards and fits:
                    out.setdefault(m.zone, []).append(Shape(m, acc, count))
    return out


def _allowed(name: str, allow: list[str]) -> bool:
    return not allow or any(fnmatch.fnmatchcase(name, p) for p in allow)
