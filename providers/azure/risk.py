"""Azure Spot placement scores and Spot eviction-rate bands: Azure's High / Medium / Low
word on a size's spot capacity per availability zone, and the share of its Spot VMs evicted
per hour per location, each read behind a cache that respects the API's throttling.

`POST /subscriptions/{id}/providers/Microsoft.Compute/locations/{location}/placementScores/
spot/generate` with `desiredLocations`, `desiredSizes` (`sku`), `desiredCount` and
`availabilityZones: true` answers `placementScores` rows of `sku`, `region`,
`availabilityZone`, `score` and `isQuotaAvailable` (Azure Compute REST reference, "Spot
Placement Scores - Post", its example). The installed azure-mgmt-compute has no operation for
it, so it goes through the client's own pipeline (`send_request`: the same credential,
retries and timeouts as every other call). A score other than High, Medium or Low
("DataNotFoundOrStale", ...) or a refused call leaves the pool unscored.

The eviction-rate bands live in Azure Resource Graph's `SpotResources` table, rows of type
`microsoft.compute/skuspotevictionrate/location` with `sku.name`, `location` and
`properties.evictionRate` ("0-5", "5-10", "10-15", "15-20", "20+": "Eviction rates are
quoted per hour ... a 10% chance of being evicted within the next hour", over "the last 28
trailing days"; Microsoft Learn, "Use Azure Spot Virtual Machines", its sample query). One
`POST /providers/Microsoft.ResourceGraph/resources` (api-version 2022-10-01, objectArray
rows, `$skipToken` paging; the REST specs' ResourcesBasicQuery example) asks for every
location and size the offerings need, through the same pipeline. It runs at tenant scope
(no `subscriptions`), as public readers of this table do (redhat-developer/mapt): the
table is Azure's own data, not a subscription's resources. A band applies to every zone
of its location. A row Azure lacks, a band of another form, or a refused query leaves the
pool on its placement score.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from providers.azure.offerings import zone_name
from providers.azure.ttl import (
    EVICTION_QUERIES_PER_POLL,
    EVICTION_REFRESH,
    GRAPH_MAX_PAGES,
    GRAPH_PAGE_ROWS,
    RISK_CALLS_PER_POLL,
    RISK_REFRESH,
)
from providers.base import Market, Offering, RiskKind, RiskSignal, pool_key
from providers.risk_cache import RiskAnswers

API_VERSION = "2025-06-05"
SCORES = ("High", "Medium", "Low")
GRAPH_API_VERSION = "2022-10-01"
# An open band ("20+") has no middle: it holds every pool worse than its floor, so it is
# read a whole band width (5 points) above the floor rather than half of one.
OPEN_BAND_EXTRA = 5.0
_BAND = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:-\s*(\d+(?:\.\d+)?)|(\+))\s*%?\s*$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # what a size or location may be inside the query


def send(client: Any, method: str, url: str, body: Any) -> Any:
    """One ARM call through the compute client's own pipeline (its credential, retries and
    timeouts); the answer's JSON. azure-mgmt-compute's multi-API client (33 to 34) has no
    send_request of its own, only its pipeline's."""
    from azure.core.rest import HttpRequest

    request = HttpRequest(method, url, json=body)
    if hasattr(client, "send_request"):
        resp = client.send_request(request)
    else:
        pipeline = client._client
        request.url = pipeline.format_url(request.url)
        resp = pipeline.send_request(request)
    resp.raise_for_status()
    return json.loads(resp.text() or "{}")


def band_percent(text: object) -> float | None:
    """An eviction-rate band as the percent per hour it stands for: "5-10" -> 7.5,
    "20+" -> 25 (OPEN_BAND_EXTRA); None when it is no band."""
    m = _BAND.match(str(text or ""))
    if not m:
        return None
    low = float(m.group(1))
    if m.group(3):
        return low + OPEN_BAND_EXTRA
    high = float(m.group(2))
    return (low + high) / 2 if high >= low else None


def eviction_query(pairs: Iterable[tuple[str, str]]) -> str:
    """The Resource Graph query for these (location, size) pairs' bands ("" for none that
    can be asked: names are quoted into the query, so only plain ones are)."""
    pairs = [(loc, size) for loc, size in pairs if _NAME.match(loc) and _NAME.match(size)]
    if not pairs:
        return ""
    locations = ", ".join(f"'{loc.lower()}'" for loc in sorted({p[0] for p in pairs}))
    sizes = ", ".join(f"'{size.lower()}'" for size in sorted({p[1] for p in pairs}))
    return (
        "SpotResources\n"
        "| where type =~ 'microsoft.compute/skuspotevictionrate/location'\n"
        f"| where location in~ ({locations})\n"
        f"| where sku.name in~ ({sizes})\n"
        "| project skuName = tostring(sku.name), location = tostring(location), "
        "evictionRate = tostring(properties.evictionRate)\n"
        "| order by skuName asc, location asc"
    )


def eviction_bands(rows: Iterable[Any]) -> dict[tuple[str, str], str]:
    """(location, size), both lower case -> band text, from a query's objectArray rows;
    rows whose band is not one are left out."""
    out: dict[tuple[str, str], str] = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        band = str(row.get("evictionRate") or "").strip().rstrip("%").strip()
        if band_percent(band) is not None:
            key = (str(row.get("location", "")).lower(), str(row.get("skuName", "")).lower())
            out[key] = band
    return out


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
        out: dict[str, str] = {}
        for row in send(self._client(), "POST", url, body).get("placementScores") or []:
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


class EvictionRates:
    def __init__(
        self,
        client: Callable[[], Any],
        now: Callable[[], datetime],
        emit: Callable[[str], None],
    ) -> None:
        self._client = client
        # the (location, size) pairs asked together -> (location, size) -> band
        self._bands: RiskAnswers[tuple[tuple[str, str], ...], dict[tuple[str, str], str]] = (
            RiskAnswers(EVICTION_REFRESH, EVICTION_QUERIES_PER_POLL, now, emit)
        )

    def _ask(self, pairs: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], str]:
        url = f"/providers/Microsoft.ResourceGraph/resources?api-version={GRAPH_API_VERSION}"
        options: dict[str, Any] = {"resultFormat": "objectArray", "$top": GRAPH_PAGE_ROWS}
        query = eviction_query(pairs)
        if not query:
            return {}
        body: dict[str, Any] = {"query": query, "options": options}
        client, rows = self._client(), list[Any]()
        for _ in range(GRAPH_MAX_PAGES):
            page = send(client, "POST", url, body)
            rows.extend(page.get("data") or [])
            token = page.get("$skipToken")
            if not token:
                break
            options["$skipToken"] = token
        return eviction_bands(rows)

    def signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        spot = [o for o in offerings if o.market is Market.SPOT]
        pairs = tuple(sorted({(o.region.lower(), o.instance_type.lower()) for o in spot}))
        if not pairs:
            return []
        self._bands.refresh(
            [pairs],
            self._ask,
            lambda _, exc: f"azure: no spot eviction rates from Resource Graph: {exc}",
        )
        bands = self._bands.get(pairs) or {}
        out = []
        for o in spot:
            band = bands.get((o.region.lower(), o.instance_type.lower()))
            percent = band_percent(band)
            if band is not None and percent is not None:
                pool = pool_key(o.cloud, o.zone, o.instance_type, o.market)
                out.append(RiskSignal(pool, RiskKind.AZURE_EVICTION_RATE, percent, band))
        return out
