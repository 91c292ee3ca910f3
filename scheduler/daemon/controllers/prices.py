"""Polls every provider for offerings (concurrently) and keeps the catalog and price history,
and each spot pool's prior interruption rate from its cloud's risk data."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlmodel import col, select

from providers.base import Offering
from scheduler.core import hazard
from scheduler.core.catalog import Catalog
from scheduler.core.clock import Clock
from scheduler.core.jobspec import MAX_NODES
from scheduler.daemon.controllers.base import CatalogHolder, Clouds, Db, safe_message
from scheduler.daemon.controllers.gang import request_limit_reason
from scheduler.state.audit import emit
from scheduler.state.models import PoolState, PriceSample


def _request_limits(clouds: Clouds, provider_of: dict[str, str]) -> dict[str, tuple[int, str]]:
    """Pools whose provider launches fewer instances in one request than the largest gang:
    a gang bigger than that is not placed there (the launch would be refused unsent, and the
    job would lose a round to each such pool)."""
    most: dict[str, int] = {}
    for name in set(provider_of.values()):
        provider = clouds.get(name)
        if provider is not None and provider.capabilities.max_count < MAX_NODES:
            most[name] = provider.capabilities.max_count
    return {
        pool: (most[name], request_limit_reason(name, most[name]))
        for pool, name in provider_of.items()
        if name in most
    }


class PriceController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        catalog: CatalogHolder,
        reprice: Callable[[Catalog, Callable[[], None]], None] | None = None,
    ) -> None:
        # Called with the new catalog and the swap to make (spend charges up to the moment
        # the prices change, and the swap happens inside its write).
        self.reprice = reprice
        self.db = db
        self.clock = clock
        self._clouds = clouds  # re-read each pass: a reload may change the providers
        self.holder = catalog

    def poll(self) -> None:
        """Refresh offerings; a failing provider keeps its last offerings and says so."""
        clouds = self._clouds()
        now = self.clock.now()
        snap = self.holder.current
        old, old_provider = snap.catalog, snap.provider_of_pool
        # An observe-only provider (enabled = false) offers nothing: nothing new goes there.
        selling = [name for name in clouds if name not in clouds.observe_only]
        results = clouds.gather({name: (name, lambda p: p.offerings()) for name in selling})
        events = clouds.gather({name: (name, lambda p: p.drain_events()) for name in clouds})
        by_provider: dict[str, list[Offering]] = {}
        with self.db.write() as s:
            for name, r in results.items():
                if r.ok and r.value is not None:
                    by_provider[name] = r.value
                else:
                    assert r.error is not None
                    keep = [o for o in old if old_provider.get(o.pool) == name]
                    by_provider[name] = keep
                    emit(
                        s,
                        now,
                        "prices_failed",
                        f"{name}: {safe_message(r.error)}; keeping {len(keep)} offerings",
                        level="warning",
                    )
            for name, ev in events.items():
                for e in ev.value or []:
                    emit(s, now, "provider", f"{name}: {e.message}", level=e.level)
        offerings: list[Offering] = []
        provider_of: dict[str, str] = {}
        for name, offs in by_provider.items():
            for o in offs:
                if provider_of.setdefault(o.pool, name) == name:
                    offerings.append(o)
        self._record_price_changes(old, offerings, now)
        self._record_priors(clouds, by_provider, now)
        new = Catalog(offerings)
        limits = _request_limits(clouds, provider_of)
        if self.reprice is not None:
            self.reprice(new, lambda: self.holder.set(new, provider_of, limits))
        else:
            self.holder.set(new, provider_of, limits)

    def _record_priors(
        self, clouds: Clouds, by_provider: dict[str, list[Offering]], now: datetime
    ) -> None:
        """Each spot pool's prior interruption rate from its cloud's risk data (providers
        that read any: `risk_signals`, cached behind their own TTLs), written where it
        changed; a provider whose call fails keeps the priors already recorded."""
        calls = {
            name: (name, lambda p, offs=offs: p.risk_signals(offs))  # type: ignore[attr-defined]
            for name, offs in by_provider.items()
            if offs and hasattr(clouds.get(name), "risk_signals")
        }
        if not calls:
            return
        signals = []
        for r in clouds.gather(calls).values():
            if r.ok and r.value:
                signals.extend(r.value)
        found = hazard.priors(signals)
        if not found:
            return
        with self.db.write() as s:
            known = {
                p.pool: p
                for p in s.exec(select(PoolState).where(col(PoolState.pool).in_(list(found))))
            }
            for pool, (rate, source) in found.items():
                ps = known.get(pool) or PoolState(pool=pool)
                if ps.prior_rate != rate or ps.prior_source != source:
                    ps.prior_rate, ps.prior_source, ps.prior_at = rate, source, now
                    s.add(ps)

    def _record_price_changes(self, old: Catalog, new: list[Offering], now: datetime) -> None:
        before = {o.pool: o.price_per_hour for o in old}
        changed = [o for o in new if before.get(o.pool) != o.price_per_hour]
        if not changed:
            return
        with self.db.write() as s:
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
