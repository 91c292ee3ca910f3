"""On-demand list prices from the AWS Price List (Pricing) API, with a shipped fallback.

List prices change a few times a year, so they are cached for `catalog_refresh` (a day by
default). When the Pricing API cannot be reached (no network path, no pricing:GetProducts
permission), the snapshot shipped in data/ondemand_prices.csv is used and an event says so.
"""

from __future__ import annotations

import csv
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.errors import error_code
from providers.masking import mask_message

log = logging.getLogger("spotwise.providers.aws")

SNAPSHOT_FILE = "ondemand_prices.csv"
# Instance types per ANY_OF filter value: every GPU type of a region fits in one (about 65),
# and the Filter's Value string stays far below the API's 1 KB request-field sizes.
ANY_OF_MAX = 100

# One Linux, shared-tenancy, no-preinstalled-software, used-capacity product per type/region.
_BASE_FILTERS = (
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
)


@dataclass(slots=True)
class _Entry:
    prices: dict[str, float]
    fetched_at: datetime
    from_snapshot: bool
    asked: frozenset[str] = frozenset()


def load_snapshot() -> dict[tuple[str, str], float]:
    """(region, instance type) -> USD/h from the shipped CSV."""
    out: dict[tuple[str, str], float] = {}
    text = resources.files("providers.aws").joinpath("data", SNAPSHOT_FILE).read_text()
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        out[(row["region"], row["instance_type"])] = float(row["price_per_hour"])
    return out


def parse_product(doc: str | dict[str, Any]) -> tuple[str, float] | None:
    """(instance type, USD/h) from one PriceList entry, or None when it is not a plain
    hourly Linux on-demand price (the entry carries JSON text)."""
    product = json.loads(doc) if isinstance(doc, str) else doc
    attrs = product.get("product", {}).get("attributes", {})
    itype = attrs.get("instanceType")
    if not itype:
        return None
    if attrs.get("operation", "RunInstances") != "RunInstances":  # RunInstances:xxxx = licensed
        return None
    prices: list[float] = []
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if str(dim.get("unit", "Hrs")).lower() not in ("hrs", "hours", "hour"):
                continue
            try:
                usd = float(dim.get("pricePerUnit", {}).get("USD", ""))
            except ValueError:
                continue
            if usd > 0:
                prices.append(usd)
    return (itype, min(prices)) if prices else None


class OnDemandPrices:
    """Per-region cache of on-demand prices; thread-safe."""

    def __init__(
        self,
        client: Callable[[], Any],
        *,
        ttl: timedelta,
        retry_after: timedelta,
        emit: Callable[[str], None],
        secrets: Callable[[], list[str]] = list,
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._retry_after = retry_after  # after a fallback, try the API again this soon
        self._emit = emit
        self._secrets = secrets
        self._cache: dict[str, _Entry] = {}
        self._snapshot: dict[tuple[str, str], float] | None = None
        self._lock = threading.Lock()

    def snapshot(self) -> dict[tuple[str, str], float]:
        if self._snapshot is None:
            self._snapshot = load_snapshot()
        return self._snapshot

    def prices(self, region: str, instance_types: Sequence[str], now: datetime) -> dict[str, float]:
        with self._lock:
            entry = self._cache.get(region)
            fresh = self._retry_after if entry and entry.from_snapshot else self._ttl
            if (
                entry is None
                or now - entry.fetched_at >= fresh
                or self._missing(entry, instance_types)
            ):
                entry = self._refresh(region, instance_types, now, entry)
                self._cache[region] = entry
            return {t: entry.prices[t] for t in instance_types if t in entry.prices}

    @staticmethod
    def _missing(entry: _Entry, instance_types: Sequence[str]) -> bool:
        # A newly allowed type is looked up at once rather than after a day.
        return not entry.from_snapshot and any(t not in entry.asked for t in instance_types)

    def _refresh(
        self, region: str, instance_types: Sequence[str], now: datetime, old: _Entry | None
    ) -> _Entry:
        snap = self.snapshot()
        try:
            found = self._fetch(region, instance_types)
        except (BotoCoreError, ClientError) as exc:
            reason = mask_message(f"{error_code(exc)}: {exc}", self._secrets())
            prices = {t: p for (r, t), p in snap.items() if r == region}
            self._emit(
                f"aws: Pricing API unreachable for {region} ({reason}); using the shipped "
                f"on-demand price snapshot ({len(prices)} types) until it answers again"
            )
            if old is not None and not old.from_snapshot:  # a day-old live price beats a snapshot
                prices.update(old.prices)
            return _Entry(prices, now, from_snapshot=True)
        missing = [t for t in instance_types if t not in found]
        filled = [t for t in missing if (region, t) in snap]
        for t in filled:
            found[t] = snap[(region, t)]
        if filled:
            self._emit(
                f"aws: the Pricing API has no on-demand price for {', '.join(sorted(filled))} "
                f"in {region}; using the shipped snapshot for them"
            )
        for t in missing:
            if t not in found:
                log.info("aws: no on-demand price for %s in %s; offered as spot only", t, region)
        # Remember what was asked for, so unknown types are not re-queried on every poll.
        asked = frozenset(instance_types) | (old.asked if old and not old.from_snapshot else set())
        return _Entry(found, now, from_snapshot=False, asked=asked)

    def _fetch(self, region: str, instance_types: Sequence[str]) -> dict[str, float]:
        """Every type's price in one GetProducts query per region (paged): `instanceType`
        ANY_OF a comma-separated list (Price List API reference, Filter.Type: "ANY_OF:
        Returns products where the field value is any of the provided values"), rather than
        one query per type, which cost about 65 sequential calls per region at start."""
        client = self._client()
        paginator = client.get_paginator("get_products")
        wanted = sorted(set(instance_types))
        out: dict[str, float] = {}
        for chunk in _chunks(wanted, ANY_OF_MAX):
            filters = [
                {"Type": "ANY_OF", "Field": "instanceType", "Value": ",".join(chunk)},
                *(
                    {"Type": "TERM_MATCH", "Field": f, "Value": v}
                    for f, v in (("regionCode", region), *_BASE_FILTERS)
                ),
            ]
            pages = paginator.paginate(
                ServiceCode="AmazonEC2",
                Filters=filters,
                FormatVersion="aws_v1",
                PaginationConfig={"PageSize": 100},
            )
            for page in pages:
                for doc in page.get("PriceList", []):
                    got = parse_product(doc)
                    if got and got[0] in chunk:
                        out[got[0]] = min(out.get(got[0], got[1]), got[1])
        return out


def _chunks(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)] or [[]]
