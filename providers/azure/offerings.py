"""What can be bought: GPU sizes per location and zone with Linux spot and on-demand prices.

Resource SKUs are cached for `catalog_refresh`, the assembled offerings (prices) for
`price_refresh`. A location that fails keeps its last offerings, with an event; only when no
location answers at all is the first error raised. Zones are "<location>-<n>" so a pool is
unique across locations; a size without zones in a location is offered as "<location>".
"""

from __future__ import annotations

import threading
from datetime import datetime

from providers.azure.api import Api, read_list
from providers.azure.prices import RetailPrices
from providers.azure.skus import GpuSize, parse_sku
from providers.base import Market, Offering, ProviderError

CLOUD = "azure"


def zone_name(location: str, zone: str) -> str:
    return f"{location}-{zone}" if zone else location


def split_zone(location: str, zone: str) -> str:
    """The Azure zone number of one of our zone names ("" for a regional offering)."""
    prefix = f"{location}-"
    return zone[len(prefix) :] if zone.startswith(prefix) else ""


class Offerings:
    def __init__(self, api: Api, prices: RetailPrices) -> None:
        self._api = api
        self._prices = prices
        self._lock = threading.Lock()
        self._sizes: dict[str, tuple[datetime, list[GpuSize]]] = {}
        self._offers: dict[str, tuple[datetime, list[Offering]]] = {}

    def all(self) -> list[Offering]:
        s = self._api.settings
        if not s.enabled:
            return []
        out: dict[str, Offering] = {}
        failures: list[ProviderError] = []
        for location in s.locations:
            try:
                got = self._location(location)
            except ProviderError as exc:
                with self._lock:
                    stale = self._offers.get(location)
                if stale is not None:
                    self._api.emit(
                        f"azure: price refresh failed in {location} ({exc}); keeping the "
                        f"offerings seen at {stale[0].isoformat()}"
                    )
                    got = stale[1]
                else:
                    self._api.emit(f"azure: no offerings from {location}: {exc}")
                    failures.append(exc)
                    continue
            for o in got:
                out.setdefault(o.pool, o)
        if failures and not out:
            raise failures[0]
        return list(out.values())

    def sizes(self, location: str) -> list[GpuSize]:
        now = self._api.now()
        s = self._api.settings
        with self._lock:
            cached = self._sizes.get(location)
        if cached is not None and now - cached[0] < s.catalog_refresh:
            return cached[1]
        compute = self._api.compute()
        raws = self._api.call(
            f"resource_skus.list in {location}",
            lambda: read_list(
                lambda **kw: compute.resource_skus.list(filter=f"location eq '{location}'", **kw)
            ),
        )
        found: dict[str, GpuSize] = {}
        for raw in raws:
            size = parse_sku(raw, location, s.vm_sizes)
            if size is not None:
                found.setdefault(size.name, size)
        out = sorted(found.values(), key=lambda g: g.name)
        with self._lock:
            self._sizes[location] = (now, out)
        return out

    def _location(self, location: str) -> list[Offering]:
        now = self._api.now()
        with self._lock:
            cached = self._offers.get(location)
        if cached is not None and now - cached[0] < self._api.settings.price_refresh:
            return cached[1]
        sizes = self.sizes(location)
        spot, on_demand = self._prices.prices(location) if sizes else ({}, {})
        out: list[Offering] = []
        for size in sizes:
            for z in size.zones or ("",):
                zone = zone_name(location, z)
                if size.spot and size.name in spot:
                    out.append(_offering(location, zone, size, Market.SPOT, spot[size.name], now))
                if size.name in on_demand:
                    out.append(
                        _offering(location, zone, size, Market.ON_DEMAND, on_demand[size.name], now)
                    )
        with self._lock:
            self._offers[location] = (now, out)
        return out


def _offering(
    location: str, zone: str, size: GpuSize, market: Market, price: float, now: datetime
) -> Offering:
    return Offering(
        cloud=CLOUD, region=location, zone=zone, instance_type=size.name,
        gpu_model=size.gpu_model, gpu_count=size.gpu_count, gpu_memory_gb=size.gpu_memory_gb,
        vcpus=size.vcpus, memory_gb=size.memory_gb, market=market, price_per_hour=price,
        seen_at=now,
    )  # fmt: skip
