"""GcpProvider: the Provider protocol over Compute Engine and the Cloud Billing Catalog.

A thin composition of offerings.py (machine/accelerator types, SKU prices) and instances.py
(launch, describe, terminate, list, find), every cache lifetime in ttl.py; the Provider methods
forward to them through providers/adapter.py. Nothing a restart could lose is kept: VMs are
found again by their deterministic names and labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from providers.adapter import Clock, CloudAdapter
from providers.base import Capabilities, Offering, RiskSignal
from providers.gcp import ttl
from providers.gcp.api import Api
from providers.gcp.gangs import MAX_GANG
from providers.gcp.instances import Instances, instance_name, request_id
from providers.gcp.offerings import Offerings
from providers.gcp.risk import CapacityAdvice, CapacityHistory
from providers.gcp.settings import GcpSettings
from providers.preflight import Check

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
    # A gang is one instances.bulkInsert with count = minCount = N (gangs.py).
    max_count=MAX_GANG,
    # Compact placement policies, where the machine series takes one (machine_series.py).
    placement_groups=True,
    # Boot disks are auto_delete; a gang's resource policy outlives its VMs (leak collected).
    leaves_resources=True,
)


class GcpProvider(CloudAdapter):
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
        api = Api(settings, credentials, clock)
        super().__init__(api, Offerings(api), Instances(api, owner, CAPABILITIES))
        # The notice asked for at launch (preemptionNoticeDuration) plus the shutdown window.
        window = settings.preemption_notice + ttl.SHUTDOWN_WINDOW
        self.capabilities = dataclasses.replace(CAPABILITIES, notice_window=window)
        advice = (
            lambda: api.compute("AdviceClient"),
            lambda: settings.project,
            api.now,
            api.emit,
            lambda: api.timeout,
        )
        self._advice = CapacityAdvice(*advice)
        self._history = CapacityHistory(*advice)

    def risk_signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        """Estimated Spot uptime and the recent preemption share per zone and shape (risk.py:
        cached, rate-kept); scheduler.core.hazard picks between them."""
        return self._advice.signals(offerings) + self._history.signals(offerings)

    def preflight(self) -> list[Check]:
        """`spotwise doctor`: this project checked before the first job (preflight.py)."""
        from providers.gcp.preflight import preflight

        return preflight(self)
