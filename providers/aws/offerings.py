"""What can be bought: GPU types, their zones, spot and on-demand prices, per region, cached.

Instance types and zones are cached for `catalog_refresh`, the assembled offerings (spot
prices) for `price_refresh` (see ttl.py). A region that fails keeps its last offerings, with
an event. Zones are EC2's own names: a Local Zone (``us-east-1-atl-1a``) is its own pool,
never folded into ``us-east-1a``; its region is the parent region it was listed from.
"""

from __future__ import annotations

import threading
from datetime import datetime

from providers.aws.api import Api
from providers.aws.instance_types import GpuType, fetch_gpu_types, fetch_spot_prices, fetch_zones
from providers.aws.network import Networks
from providers.aws.parse import CLOUD
from providers.aws.pricing import OnDemandPrices
from providers.base import Market, Offering, ProviderError


class Offerings:
    def __init__(self, api: Api, networks: Networks, ondemand: OnDemandPrices) -> None:
        self._api = api
        self._networks = networks
        self._ondemand = ondemand
        self._lock = threading.Lock()
        self._types: dict[str, tuple[datetime, tuple[dict[str, GpuType], dict[str, list[str]]]]]
        self._types = {}
        self._offers: dict[str, tuple[datetime, list[Offering]]] = {}

    def all(self) -> list[Offering]:
        """Every region's offerings; a failing region keeps its last list (with an event),
        and only when no region answers at all is the first error raised."""
        if not self._api.settings.enabled:
            return []
        out: dict[str, Offering] = {}
        failures: list[ProviderError] = []
        for region in self._api.settings.regions:
            try:
                got = self._region(region)
            except ProviderError as exc:
                with self._lock:
                    stale = self._offers.get(region)
                if stale is not None:
                    self._api.emit(
                        f"aws: price refresh failed in {region} ({exc}); keeping the offerings "
                        f"seen at {stale[0].isoformat()}"
                    )
                    got = stale[1]
                else:
                    self._api.emit(f"aws: no offerings from {region}: {exc}")
                    failures.append(exc)
                    continue
            for o in got:
                out.setdefault(o.pool, o)  # one offering per (zone, type, market)
        if failures and not out:
            raise failures[0]
        return list(out.values())

    def _region(self, region: str) -> list[Offering]:
        now = self._api.now()
        with self._lock:
            cached = self._offers.get(region)
        if cached is not None and now - cached[0] < self._api.settings.price_refresh:
            return cached[1]
        types, zones_by_type = self._gpu_types(region, now)
        net = self._networks.get(region)
        ec2 = self._api.ec2(region)
        spot_types = [t for t, g in types.items() if g.spot and zones_by_type.get(t)]
        spot = self._api.call(
            f"describe_spot_price_history in {region}",
            lambda: fetch_spot_prices(ec2, spot_types, now),
        )
        od_types = [t for t, g in types.items() if g.on_demand and zones_by_type.get(t)]
        on_demand = self._ondemand.prices(region, od_types, now)
        offers: dict[tuple[str, str, Market], Offering] = {}
        for name, gpu in sorted(types.items()):
            for zone in dict.fromkeys(zones_by_type.get(name, [])):
                if not net.usable(zone):
                    continue
                price = spot.get((zone, name))
                if gpu.spot and price is not None:
                    offers[(zone, name, Market.SPOT)] = _offering(
                        region, zone, gpu, Market.SPOT, price, now
                    )
                if gpu.on_demand and name in on_demand:
                    offers[(zone, name, Market.ON_DEMAND)] = _offering(
                        region, zone, gpu, Market.ON_DEMAND, on_demand[name], now
                    )
        out = list(offers.values())
        with self._lock:
            self._offers[region] = (now, out)
        return out

    def _gpu_types(
        self, region: str, now: datetime
    ) -> tuple[dict[str, GpuType], dict[str, list[str]]]:
        with self._lock:
            cached = self._types.get(region)
        if cached is not None and now - cached[0] < self._api.settings.catalog_refresh:
            return cached[1]
        ec2 = self._api.ec2(region)
        s = self._api.settings
        types = self._api.call(
            f"describe_instance_types in {region}",
            lambda: fetch_gpu_types(ec2, s.instance_types, s.architectures),
        )
        zones = self._api.call(
            f"describe_instance_type_offerings in {region}",
            lambda: fetch_zones(ec2, list(types)),
        )
        with self._lock:
            self._types[region] = (now, (types, zones))
        return types, zones


def _offering(
    region: str, zone: str, gpu: GpuType, market: Market, price: float, now: datetime
) -> Offering:
    return Offering(
        cloud=CLOUD, region=region, zone=zone, instance_type=gpu.instance_type,
        gpu_model=gpu.gpu_model, gpu_count=gpu.gpu_count, gpu_memory_gb=gpu.gpu_memory_gb,
        vcpus=gpu.vcpus, memory_gb=gpu.memory_gb, market=market, price_per_hour=price,
        seen_at=now,
    )  # fmt: skip
