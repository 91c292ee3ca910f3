"""Linux spot and on-demand prices from the public Retail Prices API (no credentials).

One query per location (Virtual Machines, Consumption rows, GPU sizes), following
NextPageLink. Windows rows share armSkuName and meterName with Linux ones and are told
apart by productName ("... Windows", also spelled "... Win"); Cloud Services and Dedicated
Host rows and meters of a non-primary region are dropped too. Spot is the meter whose name
contains "Spot"; on-demand the one with neither "Spot" nor "Low Priority". HTTP 429 is
waited out (Retry-After) and retried within the same refresh.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from providers.azure import ttl
from providers.base import Throttled, TransientError

_WINDOWS = re.compile(r"\bWin(dows)?\b", re.IGNORECASE)
# Rows that are not the VM's Linux pay-as-you-go meter though they carry its armSkuName and
# meterName: Cloud Services (classic) and Dedicated Host products. SkyPilot's
# fetch_azure.py drops productName containing " Win", " Cloud Services" and
# " CloudServices"; gpuhunt's azure.py filters out "Windows" and "Dedicated" (and Low
# Priority meters). Either could replace the Linux on-demand price (3.06 became 3.60).
_NOT_VM = re.compile(r"Cloud ?Services|Dedicated", re.IGNORECASE)


def location_filter(location: str) -> str:
    return (
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and "
        f"armRegionName eq '{location}' and contains(armSkuName, 'Standard_N')"
    )


class RetailPrices:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        emit: Callable[[str], None] = lambda _: None,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._sleep = sleep
        self._emit = emit

    def prices(self, location: str) -> tuple[dict[str, float], dict[str, float]]:
        """(spot, on-demand) Linux $/hour per armSkuName in `location`."""
        query = urllib.parse.urlencode({"$filter": location_filter(location)})
        url: str | None = f"{self._url}?{query}"
        spot: dict[str, tuple[str, float]] = {}
        od: dict[str, tuple[str, float]] = {}
        pages = 0
        while url:
            doc = self._get(url, location)
            pages += 1
            for item in doc.get("Items") or []:
                _take(item, location, spot, od)
            url = doc.get("NextPageLink") or None
            if pages > 1000:
                raise TransientError(f"azure prices in {location}: more than 1000 pages")
        return {k: v for k, (_, v) in spot.items()}, {k: v for k, (_, v) in od.items()}

    def _get(self, url: str, location: str) -> dict[str, Any]:
        for attempt in range(ttl.PRICES_RETRIES + 1):
            req = urllib.request.Request(url, headers={"Accept": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as exc:
                if exc.code == 429 and attempt < ttl.PRICES_RETRIES:
                    wait = _retry_after(exc.headers.get("Retry-After"))
                    self._emit(
                        f"azure prices in {location}: throttled (429), retrying in {wait:g}s"
                    )
                    self._sleep(wait)
                    continue
                cls = Throttled if exc.code == 429 else TransientError
                raise cls(f"azure prices in {location}: HTTP {exc.code}") from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise TransientError(
                    f"azure prices in {location}: {type(exc).__name__}: {exc}"
                ) from None
        raise Throttled(f"azure prices in {location}: still throttled")  # pragma: no cover


def _retry_after(value: str | None) -> float:
    try:
        wait = float(value) if value is not None else 1.0
    except ValueError:
        wait = 1.0
    return max(0.0, min(wait, ttl.PRICES_MAX_WAIT.total_seconds()))


def _take(
    item: dict[str, Any],
    location: str,
    spot: dict[str, tuple[str, float]],
    od: dict[str, tuple[str, float]],
) -> None:
    """Keep one Linux Consumption row (the newest effectiveStartDate per SKU and market)."""
    if item.get("type") != "Consumption" or item.get("armRegionName") != location:
        return
    product = str(item.get("productName", ""))
    if _WINDOWS.search(product) or _NOT_VM.search(product):
        return
    # A meter billed from another region (isPrimaryMeterRegion false) repeats a price that
    # is not this region's own.
    if item.get("isPrimaryMeterRegion") is False:
        return
    if str(item.get("unitOfMeasure", "1 Hour")) != "1 Hour":
        return
    meter = str(item.get("meterName", ""))
    sku = str(item.get("armSkuName", ""))
    try:
        price = float(item.get("retailPrice", item.get("unitPrice")) or 0)
    except (TypeError, ValueError):
        return
    if not sku or price <= 0:
        return
    if "Spot" in meter:
        target = spot
    elif "Low Priority" in meter:
        return
    else:
        target = od
    start = str(item.get("effectiveStartDate", ""))
    seen = target.get(sku)
    if seen is None or start >= seen[0]:
        target[sku] = (start, price)
