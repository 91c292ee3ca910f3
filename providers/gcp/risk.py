"""Capacity advice (advice.capacity): GCE's estimated uptime of Spot VMs per zone and shape,
read behind a cache that respects the API's quota.

One request per (zone, shape): the zone as the distribution policy's only zone and the
machine type (with its attached GPUs) as the only instance selection, Spot provisioning,
one VM. GCE answers one recommendation whose `scores.estimatedUptime` is "the estimated run
time of the majority of Spot VMs in the request before preemption" (compute_v1
CapacityAdviceResponseRecommendationScores); scheduler.core.hazard reads it as a median. The
uptime is a string: read as a protobuf Duration ("5400s"), or with an m/h/d unit. A zone or
shape without a recommendation, or a refused call, leaves the pool unscored (it keeps the
configured prior) until RISK_REFRESH has passed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from providers.base import Market, Offering, RiskKind, RiskSignal
from providers.gcp.price_sheet import parse_shape
from providers.gcp.settings import region_of_zone
from providers.gcp.ttl import RISK_CALLS_PER_POLL, RISK_REFRESH
from providers.risk_cache import RiskAnswers

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_HOURS = {"s": 1 / 3600, "m": 1 / 60, "h": 1.0, "d": 24.0}


def uptime_hours(text: object) -> float | None:
    """ "5400s" (a protobuf Duration) or "1.5h" as hours; None when it is neither."""
    m = _DURATION.match(str(text or ""))
    return float(m.group(1)) * _HOURS[m.group(2)] if m else None


class CapacityAdvice:
    def __init__(
        self,
        client: Callable[[], Any],
        project: Callable[[], str],
        now: Callable[[], datetime],
        emit: Callable[[str], None],
        timeout: Callable[[], float],
    ) -> None:
        self._client = client
        self._project = project
        self._timeout = timeout
        # (zone, machine shape) -> estimated uptime in hours (None: GCE gave none)
        self._hours: RiskAnswers[tuple[str, str], float | None] = RiskAnswers(
            RISK_REFRESH, RISK_CALLS_PER_POLL, now, emit
        )

    def _ask(self, zone: str, shape: str) -> float | None:
        from google.cloud import compute_v1

        machine, accel, count = parse_shape(shape)
        selection = compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicyInstanceSelection(
            machine_types=[machine]
        )
        if accel:
            selection.guest_accelerators = [
                compute_v1.AcceleratorConfig(accelerator_type=accel, accelerator_count=count)
            ]
        resource = compute_v1.CapacityAdviceRequest(
            size=1,
            instance_properties=compute_v1.CapacityAdviceRequestInstanceProperties(
                scheduling=compute_v1.CapacityAdviceRequestInstancePropertiesScheduling(
                    provisioning_model="SPOT"
                )
            ),
            instance_flexibility_policy=compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicy(
                instance_selections={"shape": selection}
            ),
            distribution_policy=compute_v1.CapacityAdviceRequestDistributionPolicy(
                zones=[
                    compute_v1.CapacityAdviceRequestDistributionPolicyZoneConfiguration(
                        zone=f"zones/{zone}"
                    )
                ]
            ),
        )
        resp = self._client().capacity(
            project=self._project(),
            region=region_of_zone(zone),
            capacity_advice_request_resource=resource,
            timeout=self._timeout(),
        )
        for rec in resp.recommendations:
            hours = uptime_hours(rec.scores.estimated_uptime)
            if hours is not None and hours > 0:
                return hours
        return None

    def signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        spot = [o for o in offerings if o.market is Market.SPOT]
        self._hours.refresh(
            sorted({(o.zone, o.instance_type) for o in spot}),
            lambda key: self._ask(*key),
            lambda key, exc: f"gcp: no capacity advice for {key[1]} in {key[0]}: {exc}",
        )
        out = []
        for o in spot:
            hours = self._hours.get((o.zone, o.instance_type))
            if hours is not None:
                out.append(RiskSignal(o.pool, RiskKind.GCP_ESTIMATED_UPTIME, hours))
        return out
