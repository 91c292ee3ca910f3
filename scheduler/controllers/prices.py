"""Polls every provider for offerings and keeps the catalog and price history."""

from __future__ import annotations

from datetime import datetime

from providers.base import Offering
from scheduler.audit import emit
from scheduler.catalog import Catalog
from scheduler.controllers.base import CatalogHolder, ControllerBase, safe_message
from scheduler.models import PriceSample


class PriceController(ControllerBase):
    def poll_prices(self) -> None:
        """Refresh offerings from every provider; a failing provider keeps its last offerings."""
        now = self.clock.now()
        old = self.catalogs
        by_provider: dict[str, list[Offering]] = {}
        for name, provider in self.providers.items():
            try:
                by_provider[name] = provider.offerings()
            except Exception as e:  # a provider bug must not take the daemon down
                keep = [
                    o for i, o in enumerate(old.catalog) if old.provider_of_pool.get(o.pool) == name
                ]
                by_provider[name] = keep
                with self._session() as s:
                    emit(s, now, "prices_failed", f"{name}: {safe_message(e)}", level="warning")
                    s.commit()
            drain = getattr(provider, "drain_events", None)
            if callable(drain):
                messages = drain()
                if messages:
                    with self._session() as s:
                        for m in messages:
                            emit(s, now, "provider", f"{name}: {m}", level="warning")
                        s.commit()
        offerings: list[Offering] = []
        provider_of: dict[str, str] = {}
        for name, offs in by_provider.items():
            for o in offs:
                if provider_of.setdefault(o.pool, name) == name:
                    offerings.append(o)
        self._record_price_changes(old.catalog, offerings, now)
        self.catalogs = CatalogHolder(Catalog(offerings), provider_of)

    def _record_price_changes(self, old: Catalog, new: list[Offering], now: datetime) -> None:
        before = {o.pool: o.price_per_hour for o in old}
        changed = [o for o in new if before.get(o.pool) != o.price_per_hour]
        if not changed:
            return
        with self._session() as s:
            for o in changed:
                s.add(
                    PriceSample(
                        observed_at=now,
                        cloud=o.cloud,
                        region=o.region,
                        zone=o.zone,
                        instance_type=o.instance_type,
                        market=o.market.value,
                        price_per_hour=o.price_per_hour,
                        pool=o.pool,
                    )
                )
            s.commit()
