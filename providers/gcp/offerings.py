"""What can be bought: shapes per zone (catalog_refresh) priced from SKUs (price_refresh).

The aggregated lists and the Billing Catalog are project-wide, so one read serves every
region; a region that cannot be priced (its zones unreachable, no SKUs for it) keeps its
last offerings, with an event. A Spot price above the on-demand one for the same shape is
reported and that Spot offering left out rather than used silently.
"""

from __future__ import annotations

import threading
from datetime import datetime

from providers.base import Market, Offering, ProviderError, SettingRefused
from providers.gcp import price_sheet, ttl
from providers.gcp.api import CLOUD, Api
from providers.gcp.machine_series import boot_disk_type
from providers.gcp.price_sheet import PriceBook, Shape, accelerator_key
from providers.gcp.settings import region_of_zone


class Offerings:
    def __init__(self, api: Api) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._shapes: tuple[datetime, dict[str, list[Shape]], set[str]] | None = None
        self._book: tuple[datetime, PriceBook] | None = None
        self._offers: dict[str, tuple[datetime, list[Offering]]] = {}
        self._reported: set[str] = set()

    def all(self) -> list[Offering]:
        s = self._api.settings
        if not s.enabled:
            return []
        now = self._api.now()
        out: list[Offering] = []
        failures: list[ProviderError] = []
        try:
            shapes, bad_zones = self._catalog(now)
            book = self._prices(now)
        except ProviderError as exc:
            shapes, bad_zones, book = {}, set(), None
            failures.append(exc)
        for region in s.regions:
            cached = self._offers.get(region)
            fresh = cached is not None and now - cached[0] < s.price_refresh
            if fresh and cached is not None:
                out.extend(cached[1])
                continue
            problem = ""
            got: list[Offering] = []
            if book is None:
                problem = str(failures[0])
            else:
                got = self._region(region, shapes, book, now)
                down = sorted(z for z in bad_zones if region_of_zone(z) == region)
                if down:
                    problem = f"zone(s) {', '.join(down)} did not answer"
                elif not got and any(region_of_zone(z) == region for z in shapes):
                    problem = "no SKU prices for this region"
            if problem and cached is not None:
                self._api.emit(
                    f"gcp: price refresh failed in {region} ({problem}); keeping the offerings "
                    f"seen at {cached[0].isoformat()}"
                )
                got = cached[1]
            elif problem:
                self._api.emit(f"gcp: no offerings from {region}: {problem}")
                if not got:
                    continue
            if not problem:
                with self._lock:
                    self._offers[region] = (now, got)
            out.extend(got)
        if failures and not out:
            raise failures[0]
        return out

    def _catalog(self, now: datetime) -> tuple[dict[str, list[Shape]], set[str]]:
        s = self._api.settings
        if self._shapes is not None and now - self._shapes[0] < s.catalog_refresh:
            return self._shapes[1], self._shapes[2]
        bad: set[str] = set()

        def warn(zone: str, text: str) -> None:
            if zone and region_of_zone(zone) in s.regions:
                bad.add(zone)
                self._api.emit(f"gcp: zone {zone} is unavailable in the catalogue: {text}")

        mt_client = self._api.compute("MachineTypesClient")
        at_client = self._api.compute("AcceleratorTypesClient")
        t, page = self._api.timeout, ttl.LIST_PAGE_SIZE
        machines = self._api.call(
            "machineTypes.aggregatedList",
            lambda: price_sheet.fetch_machine_types(mt_client, s.project, t, page, warn),
        )
        accels = self._api.call(
            "acceleratorTypes.aggregatedList",
            lambda: price_sheet.fetch_accelerator_types(at_client, s.project, t, page, warn),
        )
        wanted = [
            m for m in machines
            if region_of_zone(m.zone) in s.regions and (not s.zones or m.zone in s.zones)
        ]  # fmt: skip
        shapes = price_sheet.shapes(wanted, accels, s.machine_types)
        if not bad:  # a partial answer is not cached for a day
            self._shapes = (now, shapes, bad)
        return shapes, bad

    def _prices(self, now: datetime) -> PriceBook:
        s = self._api.settings
        if self._book is not None and now - self._book[0] < s.price_refresh:
            return self._book[1]
        client = self._api.billing()
        skus = self._api.call(
            f"cloudbilling list_skus {price_sheet.BILLING_SERVICE}",
            lambda: price_sheet.fetch_skus(client, self._api.timeout, ttl.SKU_PAGE_SIZE),
        )
        book = PriceBook(skus)
        self._book = (now, book)
        return book

    def _once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            self._api.emit(message)

    def _region(
        self, region: str, shapes: dict[str, list[Shape]], book: PriceBook, now: datetime
    ) -> list[Offering]:
        """Offerings priced as launched: the machine, its bundled local SSD and the boot
        disk (`disk_size_gb` of the type the machine boots from)."""
        out: list[Offering] = []
        s = self._api.settings
        for zone in sorted(z for z in shapes if region_of_zone(z) == region):
            for shape in shapes[zone]:
                key = accelerator_key(shape.accelerator)
                if key is None:
                    continue
                try:
                    disk = boot_disk_type(shape.machine.name, s.disk_type)
                except SettingRefused as exc:  # not bootable as configured: not offered
                    self._once(f"disk:{shape.machine.name}", f"{exc}; not offered")
                    continue
                for part in book.missing_parts(region, disk):
                    self._once(
                        f"missing:{region}:{part}",
                        f"gcp: no Billing Catalog price for {part} in {region}; offerings "
                        "there exclude it",
                    )
                od = book.price(region, shape, Market.ON_DEMAND, disk, s.disk_size_gb)
                spot = book.price(region, shape, Market.SPOT, disk, s.disk_size_gb)
                if spot is not None and od is not None and spot > od:
                    self._once(
                        f"{region}/{shape.name}",
                        f"gcp: Spot price {spot:.5f}/h of {shape.name} in {region} is above "
                        f"its on-demand price {od:.5f}/h; the Spot offering is left out",
                    )
                    spot = None
                for market, price in ((Market.SPOT, spot), (Market.ON_DEMAND, od)):
                    if price is None:
                        continue
                    m = shape.machine
                    out.append(
                        Offering(
                            cloud=CLOUD, region=region, zone=zone, instance_type=shape.name,
                            gpu_model=key.model, gpu_count=shape.count,
                            gpu_memory_gb=key.memory_gb, vcpus=m.vcpus, memory_gb=m.memory_gb,
                            market=market, price_per_hour=price, seen_at=now,
                        )
                    )  # fmt: skip
        return out
