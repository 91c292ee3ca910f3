"""LocalMarket: the Provider that needs no cloud account.

Offerings come from the shipped catalog snapshot; spot availability and price are replayed
from a shipped real trace on a market clock that runs `speedup` times faster than the given
clock. Instances are local processes, each under a detached supervisor (see supervisor.py), so
they survive a daemon restart and a new LocalMarket over the same state_dir re-adopts them.

Spot pools the trace marks unavailable are left out of offerings() (like a cloud's current
capacity view); launching into one raises CapacityUnavailable(pool=...).

Every call is safe to repeat and decided from the files alone (see state.py): an instance is
RUNNING only once its job process started, PENDING while its launch or supervisor may still
act, and an instance nobody supervises is ended by whoever looks (its job killed, its end
recorded). Listings walk only `live/` markers, so thousands of ended instances cost nothing.

The market is split by concern, as the cloud adapters are split by resource: core.py (state
directory, market time, instance records), interruptions.py (the trace), observation.py
(describe, terminate), launching.py (launch) and listing.py (tags, tokens, pruning); this
module composes them and adds what makes them a Provider. core.py says how each clock is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from providers.base import Capabilities, Market, Offering, RiskSignal, pool_key
from providers.local.core import instance_id_for
from providers.local.interruptions import suggest_trace_start
from providers.local.launching import ENV_PASSTHROUGH, GANG_NODE_DELAY_ENV, Launching
from providers.local.listing import Listing
from providers.local.snapshot import CatalogRow

__all__ = [
    "ENV_PASSTHROUGH",
    "GANG_NODE_DELAY_ENV",
    "LocalMarket",
    "instance_id_for",
    "suggest_trace_start",
]


class LocalMarket(Launching, Listing):
    """Provider over local processes; market time = trace_start + (now - epoch) * speedup."""

    name = "local"
    # Tags live in JSON: any value is stored as given. Instance ids derive from the token, so
    # a token is remembered for ever; placement groups are recorded, not enforced.
    capabilities = Capabilities(
        label_max_length=1 << 16,
        label_pattern=r"(?s:.)",
        idempotency_window=None,
        visibility_delay=timedelta(0),
        launch_completes_later=True,
        max_count=8,
        placement_groups=True,
        leaves_resources=False,
    )

    def offerings(self) -> list[Offering]:
        now = self._clock.now()
        tick = self._tick(now)
        out: list[Offering] = []
        for r in self._rows:
            out.append(self._offering(r, Market.ON_DEMAND, r.price, now))
            pool = pool_key(r.cloud, r.zone, r.instance_type, Market.SPOT)
            series = self.trace.series_for(pool)
            if self.trace.is_available(series, tick):
                price = round(r.spot_price * self.trace.price_factor(series, tick), 5)
                out.append(self._offering(r, Market.SPOT, price, now))
        return out

    def risk_signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        """A stand-in for each cloud's risk data, from each pool's trace past (risk.py)."""
        from providers.local import risk

        return risk.signals(self.trace, self._tick(self._clock.now()), offerings)

    @staticmethod
    def _offering(r: CatalogRow, market: Market, price: float, now: datetime) -> Offering:
        return Offering(
            cloud=r.cloud,
            region=r.region,
            zone=r.zone,
            instance_type=r.instance_type,
            gpu_model=r.gpu_model,
            gpu_count=r.gpu_count,
            gpu_memory_gb=r.gpu_memory_gb,
            vcpus=r.vcpus,
            memory_gb=r.memory_gb,
            market=market,
            price_per_hour=price,
            seen_at=now,
        )
