"""AzureProvider: the Provider protocol over ARM (azure-mgmt-compute, azure-mgmt-network)
and the public Retail Prices API.

A thin composition: offerings.py (resource SKUs + Retail prices, cached), instances.py
(launch, describe, terminate, list, find), parse.py (ARM documents -> seam types), api.py
(credential, clients, errors), userdata.py (the boot script) and ttl.py; the Provider methods
forward to them through providers/adapter.py. Nothing a restart could lose is kept, except
the memory of our own deletes (see ttl.TOMBSTONE_KEEP).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers.adapter import Clock, CloudAdapter
from providers.azure import ttl
from providers.azure.api import Api
from providers.azure.gangs import MAX_GANG
from providers.azure.instances import Instances, vm_name
from providers.azure.offerings import Offerings
from providers.azure.prices import RetailPrices
from providers.azure.risk import EvictionRates, PlacementScores
from providers.azure.settings import AzureSettings
from providers.base import Capabilities, Offering, RiskSignal
from providers.preflight import Check

__all__ = ["AzureProvider", "vm_name"]

CAPABILITIES = Capabilities(
    # Azure tag values: up to 256 characters, any printable character. The <>%&\?/ rule
    # is for tag names ("Use tags to organize your Azure resources", Limitations), which
    # instances.tag_key() applies to keys.
    label_max_length=256,
    label_pattern=r"[^\x00-\x1f\x7f]",
    lowercase_labels=False,
    idempotency_window=None,  # deterministic VM names
    visibility_delay=ttl.VISIBILITY_DELAY,
    # Allocation failures arrive with the create operation, after launch() returned.
    launch_completes_later=True,
    # A gang is N VMs in one proximity placement group, all or nothing (gangs.py).
    max_count=MAX_GANG,
    notice_window=ttl.NOTICE_WINDOW,
    placement_groups=True,
    # NICs, OS disks and public IPs can outlive their VM.
    leaves_resources=True,
)


class AzureProvider(CloudAdapter):
    """One subscription and resource group across the configured locations."""

    name = "azure"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: AzureSettings,
        *,
        owner: str = "spotwise",
        credential: Any = None,
        authentication_policy: Any = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        api = Api(
            settings, credential=credential, authentication_policy=authentication_policy,
            clock=clock,
        )  # fmt: skip
        prices = RetailPrices(
            settings.prices_url, timeout=settings.read_timeout.total_seconds(), emit=api.emit
        )
        super().__init__(api, Offerings(api, prices), Instances(api, owner))
        self._scores = PlacementScores(api.compute, settings.subscription_id, api.now, api.emit)
        self._evictions = EvictionRates(api.compute, api.now, api.emit)

    def risk_signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        """Spot placement scores per zone and size, and eviction-rate bands per location and
        size (risk.py: cached, rate-kept); scheduler.core.hazard picks between them."""
        return self._scores.signals(offerings) + self._evictions.signals(offerings)

    def preflight(self) -> list[Check]:
        """`spotwise doctor`: this subscription checked before the first job (preflight.py)."""
        from providers.azure.preflight import preflight

        return preflight(self)

    def __repr__(self) -> str:
        return f"AzureProvider(resource_group={self.settings.resource_group!r})"
