"""Capacity advice (advice.capacity) and capacity history (advice.capacityHistory): GCE's
estimated uptime of Spot VMs, and the share of their stops that were preemptions, per zone
and shape, each read behind a cache that respects the API's quota.

One request per (zone, shape): the zone as the distribution policy's only zone and the
machine type (with its attached GPUs) as the only instance selection, Spot provisioning,
one VM. GCE answers one recommendation whose `scores.estimatedUptime` is "the estimated run
time of the majority of Spot VMs in the request before preemption" (compute_v1
CapacityAdviceResponseRecommendationScores); scheduler.core.hazard reads it as a median. The
uptime is a string: read as a protobuf Duration ("5400s"), or with an m/h/d unit. A zone or
shape without a recommendation, or a refused call, leaves the pool unscored (it keeps the
configured prior) until RISK_REFRESH has passed.

The history is asked per (zone, machine type): `instanceProperties.machineType`, Spot
provisioning, `locationPolicy.location` the zone, `types: ["PREEMPTION"]` (compute_v1
CapacityHistoryRequest; the REST reference of advice.capacityHistory). GCE answers
`preemptionHistory`, one record a day over the last 30 days, each an `interval` and a
`preemptionRate`: "(total preempted Spots) / (total Spots that stopped running)", 0 to 1
(CapacityHistoryResponsePreemptionRecord). The signal is the mean of the RECENT_DAYS newest
days; scheduler.core.hazard turns that share into a rate. Google documents no history for
"N1 machine types that have GPUs attached, custom machine types, or TPUs" ("View the
preemption rate and pricing for Spot VMs"), so an N1 shape with attached GPUs is never asked
(the bare n1-standard-4's history says nothing of its T4s). A refused call leaves the pool on
its other signals; 403 and 429 stop the project's asks, 404 the region's, for
HISTORY_REFRESH (ttl.py), said once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from providers.base import Market, Offering, RiskKind, RiskSignal
from providers.gcp.price_sheet import parse_shape
from providers.gcp.settings import region_of_zone
from providers.gcp.ttl import (
    HISTORY_CALLS_PER_POLL,
    HISTORY_REFRESH,
    RISK_CALLS_PER_POLL,
    RISK_REFRESH,
)
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


# The newest days of history the signal averages: recent enough to follow a change in the
# pool, long enough that one day with few stops does not decide it.
RECENT_DAYS = 7


def preemption_share(resp: Any) -> float | None:
    """The mean `preemptionRate` of the RECENT_DAYS newest records of a compute_v1
    CapacityHistoryResponse; None when it has none in [0, 1]."""
    days = sorted(
        (str(rec.interval.start_time), float(rec.preemption_rate))
        for rec in resp.preemption_history
        if "preemption_rate" in rec and 0.0 <= rec.preemption_rate <= 1.0
    )[-RECENT_DAYS:]
    return sum(r for _, r in days) / len(days) if days else None


class _Refused(Exception):
    """An ask skipped because its project or region refused one within HISTORY_REFRESH."""


class CapacityHistory:
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
        self._now = now
        self._timeout = timeout
        # (zone, machine type) -> mean preemption share (None: GCE gave none)
        self._shares: RiskAnswers[tuple[str, str], float | None] = RiskAnswers(
            HISTORY_REFRESH, HISTORY_CALLS_PER_POLL, now, emit
        )
        self._refused: dict[str, datetime] = {}  # "" (the project) or a region -> until

    def _ask(self, zone: str, machine: str) -> float | None:
        from google.cloud import compute_v1

        region, now = region_of_zone(zone), self._now()
        if any(now < self._refused.get(scope, now) for scope in ("", region)):
            raise _Refused
        resource = compute_v1.CapacityHistoryRequest(
            instance_properties=compute_v1.CapacityHistoryRequestInstanceProperties(
                machine_type=machine,
                scheduling=compute_v1.CapacityHistoryRequestInstancePropertiesScheduling(
                    provisioning_model="SPOT"
                ),
            ),
            location_policy=compute_v1.CapacityHistoryRequestLocationPolicy(
                location=f"zones/{zone}"
            ),
            types=["PREEMPTION"],
        )
        try:
            resp = self._client().capacity_history(
                project=self._project(),
                region=region,
                capacity_history_request_resource=resource,
                timeout=self._timeout(),
            )
        except Exception as exc:  # google.api_core's errors carry the HTTP status as .code
            code = getattr(exc, "code", None)
            if code in (403, 429):
                self._refused[""] = now + HISTORY_REFRESH
            elif code == 404:
                self._refused[region] = now + HISTORY_REFRESH
            raise
        return preemption_share(resp)

    def signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        spot = [
            o for o in offerings if o.market is Market.SPOT and not parse_shape(o.instance_type)[1]
        ]
        self._shares.refresh(
            sorted({(o.zone, o.instance_type) for o in spot}),
            lambda key: self._ask(*key),
            lambda key, exc: (
                ""
                if isinstance(exc, _Refused)
                else f"gcp: no capacity history for {key[1]} in {key[0]}: {exc}"
            ),
        )
        out = []
        for o in spot:
            share = self._shares.get((o.zone, o.instance_type))
            if share is not None:
                out.append(RiskSignal(o.pool, RiskKind.GCP_PREEMPTION_HISTORY, share))
        return out
