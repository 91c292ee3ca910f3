"""GcpProvider: the Provider protocol over Compute Engine and the Cloud Billing Catalog.

A thin composition of offerings.py (machine/accelerator types, SKU prices) and instances.py
(launch, describe, terminate, list, find), every cache lifetime in ttl.py. Nothing a restart
could lose is kept: VMs are found again by their deterministic names and labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers.base import (
    Capabilities,
    Instance,
    LaunchRequest,
    Offering,
    ProviderEvent,
    ResourceRef,
    TaggedResource,
)
from providers.gcp import ttl
from providers.gcp.api import Api, Clock
from providers.gcp.instances import Instances, instance_name, request_id
from providers.gcp.offerings import Offerings
from providers.gcp.settings import GcpSettings

__all__ = ["CAPABILITIES", "GcpProvider", "instance_name", "request_id"]

CAPABILITIES = Capabilities(
    # GCE labels: keys and values lowercase letters, digits, '_' and '-', at most 63 chars.
    label_max_length=63,
    label_pattern=r"[a-z0-9_-]",
    lowercase_labels=True,
    # The instance name is derived from the token: a second insert of a live name is 409,
    # and the requestId (uuid5 of the token) dedupes retries while the name is not yet used.
    idempotency_window=None,
    visibility_delay=ttl.VISIBILITY_DELAY,
    # instances.insert returns an operation; stockouts and quota can arrive in it later.
    launch_completes_later=True,
    max_count=1,
    placement_groups=False,
    # Boot disks are auto_delete: nothing outlives the VM.
    leaves_resources=False,
)


class GcpProvider:
    """One GCP project across the configured regions."""

    name = "gcp"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: GcpSettings,
        *,
        owner: str = "spotwise",
        credentials: Any = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        self._api = Api(settings, credentials, clock)
        self._offerings = Offerings(self._api)
        self._instances = Instances(self._api, owner, CAPABILITIES)

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
