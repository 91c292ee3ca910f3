"""AzureProvider: the Provider protocol over ARM (azure-mgmt-compute, azure-mgmt-network)
and the public Retail Prices API.

A thin composition: offerings.py (resource SKUs + Retail prices, cached), instances.py
(launch, describe, terminate, list, find), views.py (ARM documents -> seam types), api.py
(credential, clients, errors, events), userdata.py (the boot script) and ttl.py. Nothing a
restart could lose is kept, except the memory of our own deletes (see ttl.TOMBSTONE_KEEP).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers.azure import ttl
from providers.azure.api import Api, Clock
from providers.azure.instances import Instances, vm_name
from providers.azure.offerings import Offerings
from providers.azure.prices import RetailPrices
from providers.azure.settings import AzureSettings
from providers.base import (
    Capabilities,
    Instance,
    LaunchRequest,
    Offering,
    ProviderEvent,
    ResourceRef,
    TaggedResource,
)

__all__ = ["AzureProvider", "vm_name"]

CAPABILITIES = Capabilities(
    # Azure tag values: up to 256 characters; keys may not contain <>%&\?/.
    label_max_length=256,
    label_pattern=r"[^\x00-\x1f\x7f<>%&\\?/]",
    lowercase_labels=False,
    idempotency_window=None,  # deterministic VM names
    visibility_delay=ttl.VISIBILITY_DELAY,
    # Allocation failures arrive with the create operation, after launch() returned.
    launch_completes_later=True,
    max_count=1,
    placement_groups=False,
    # NICs, OS disks and public IPs can outlive their VM.
    leaves_resources=True,
)


class AzureProvider:
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
        self._api = Api(
            settings, credential=credential, authentication_policy=authentication_policy,
            clock=clock,
        )  # fmt: skip
        prices = RetailPrices(
            settings.prices_url, timeout=settings.read_timeout.total_seconds(), emit=self._api.emit
        )
        self._offerings = Offerings(self._api, prices)
        self._instances = Instances(self._api, owner)

    def __repr__(self) -> str:
        return f"AzureProvider(resource_group={self.settings.resource_group!r})"

    def offerings(self) -> list[Offering]:
        return self._offerings.all()

    def launch(self, request: LaunchRequest) -> list[Instance]:
        return self._instances.launch(request)

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        return self._instances.describe(refs)

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        self._instances.terminate(refs)

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        return self._instances.list_tagged(owner)

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        return self._instances.find_by_token(token, region)

    def drain_events(self) -> list[ProviderEvent]:
        return self._api.drain_events()
