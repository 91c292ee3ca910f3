"""Azure Spot placement scores: Azure's High / Medium / Low word on a size's spot capacity
per availability zone, read behind a cache that respects the API's throttling.

`POST /subscriptions/{id}/providers/Microsoft.Compute/locations/{location}/placementScores/
spot/generate` with `desiredLocations`, `desiredSizes` (`sku`), `desiredCount` and
`availabilityZones: true` answers `placementScores` rows of `sku`, `region`,
`availabilityZone`, `score` and `isQuotaAvailable` (Azure Compute REST reference, "Spot
Placement Scores - Post", its example). The installed azure-mgmt-compute has no operation for
it, so it goes through the client's own pipeline (`send_request`: the same credential,
retries and timeouts as every other call). A score other than High, Medium or Low
("DataNotFoundOrStale", ...) or a refused call leaves the pool unscored; the eviction-rate
band (Resource Graph's SpotResources) is not read yet.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from providers.azure.offerings import zone_name
from providers.azure.ttl import RISK_CALLS_PER_POLL, RISK_REFRESH
from providers.base import Market, Offering, RiskKind, RiskSignal, pool_key
from providers.risk_cache import RiskAnswers

API_VERSION = "2025-06-05"
SCORES = ("High", "Medium", "Low")


class PlacementScores:
    def __init__(
        self,
        client: Callable[[], Any],
        subscription: str,
        now: Callable[[], datetime],
        emit: Callable[[str], None],
    ) -> None:
        self._client = client
        self._subscription = subscription
        # (location, size) -> zone name -> score
        self._scores: RiskAnswers[tuple[str, str], dict[str, str]] = RiskAnswers(
            RISK_REFRESH, RISK_CALLS_PER_POLL, now, emit
        )

    def _ask(self, location: str, size: str) -> dict[str, str]:
        from azure.core.rest import HttpRequest

        url = (
            f"/subscriptions/{self._subscription}/providers/Microsoft.Compute/locations/"
            f"{location}/placementScores/spot/generate?api-version={API_VERSION}"
        )
        body = {
            "desiredLocations": [location],
            "desiredSizes": [{"sku": size}],
            "desiredCount": 1,
            "availabilityZones": True,
        }
        client = self._client()
        request = HttpRequest("POST", url, json=body)
        if hasattr(client, "send_request"):
            resp = client.send_request(request)
        else:  # azure-mgmt-compute's multi-API client (33 to 34) has only its pipeline's
            pipeline = client._client
            request.url = pipeline.format_url(request.url)
            resp = pipeline.send_request(request)
        resp.raise_for_status()
        out: dict[str, str] = {}
        for row in json.loads(resp.text() or "{}").get("placementScores") or []:
            if str(row.get("sku", "")).lower() != size.lower():
                continue
            score = str(row.get("score", ""))
            if score in SCORES:
                out[
                    zone_name(
                        str(row.get("region", location)), str(row.get("availabilityZone") or "")
                    )
                ] = score
        return out

    def signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        spot = [o for o in offerings if o.market is Market.SPOT]
        self._scores.refresh(
            sorted({(o.region, o.instance_type) for o in spot}),
            lambda pair: self._ask(*pair),
            lambda pair, exc: f"azure: no spot placement scores for {pair[1]} in {pair[0]}: {exc}",
        )
        out = []
        for o in spot:
            score = (self._scores.get((o.region, o.instance_type)) or {}).get(o.zone)
            if score is not None:
                pool = pool_key(o.cloud, o.zone, o.instance_type, o.market)
                out.append(RiskSignal(pool, RiskKind.AZURE_PLACEMENT_SCORE, 0.0, score))
        return out
