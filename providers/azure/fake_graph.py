"""The loopback ARM fake's Azure Resource Graph: `POST /providers/Microsoft.ResourceGraph/
resources` answering the Spot eviction-rate query (SpotResources, type
`microsoft.compute/skuspotevictionrate/location`) that providers/azure/risk.py sends.

No KQL engine: it checks the query names the table and the row type, reads the `location
in~ (...)` and `sku.name in~ (...)` lists, and answers the rows of `bands` ((location, size)
-> "0-5", ..., "20+") those lists select, projected as the query projects them (skuName,
location, evictionRate). The answer is Resource Graph's objectArray shape, `{"totalRecords",
"count", "data": [...], "facets": [], "resultTruncated": "false"}` with `$skipToken` while
rows remain (azure-rest-api-specs resourcegraph stable/2022-10-01 examples
ResourcesBasicQuery.json and ResourcesFirstPageQuery.json), and the per-user quota headers
("Guidance for throttled requests in Azure Resource Graph"). `fail` answers an error
instead (429 RateLimiting, 403 AuthorizationFailed, ...).
"""

from __future__ import annotations

import re
from typing import Any

QUOTA = 15  # queries per 5-second window per user
_TYPE = "microsoft.compute/skuspotevictionrate/location"


def _in_list(query: str, field: str) -> set[str] | None:
    m = re.search(rf"\|\s*where\s+{re.escape(field)}\s+in~\s*\(([^)]*)\)", query, re.IGNORECASE)
    return None if m is None else {v.lower() for v in re.findall(r"'([^']*)'", m.group(1))}


class ResourceGraph:
    def __init__(self) -> None:
        self.bands: dict[tuple[str, str], str] = {}  # (location, size as Azure spells it)
        self.calls: list[dict[str, Any]] = []
        self.fail: tuple[int, str] | None = None  # (HTTP status, error code)
        self.page_rows = 1000  # Resource Graph's own page limit

    def reset(self) -> None:
        self.bands, self.calls, self.fail, self.page_rows = {}, [], None, 1000

    def answer(self, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        self.calls.append(body)
        headers = {
            "x-ms-user-quota-remaining": str(QUOTA - 1),
            "x-ms-user-quota-resets-after": "00:00:05",
        }
        if self.fail is not None:
            status, code = self.fail
            return status, {"error": {"code": code, "message": f"Resource Graph: {code}"}}, {}
        query = str((body or {}).get("query") or "")
        options = (body or {}).get("options") or {}
        if not re.match(r"\s*SpotResources\b", query) or f"'{_TYPE}'" not in query:
            return (
                400,
                {"error": {"code": "BadRequest", "message": "not a SpotResources query"}},
                {},
            )
        if options.get("resultFormat", "objectArray") != "objectArray":
            return 400, {"error": {"code": "BadRequest", "message": "objectArray only"}}, {}
        locations, sizes = _in_list(query, "location"), _in_list(query, "sku.name")
        rows = [
            {"skuName": size, "location": loc, "evictionRate": band}
            for (loc, size), band in sorted(self.bands.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            if (locations is None or loc.lower() in locations)
            and (sizes is None or size.lower() in sizes)
        ]
        start = int(options.get("$skipToken") or 0)
        top = min(int(options.get("$top") or 100), self.page_rows)
        page = rows[start : start + top]
        doc: dict[str, Any] = {
            "totalRecords": len(rows),
            "count": len(page),
            "data": page,
            "facets": [],
            "resultTruncated": "false",
        }
        if start + top < len(rows):
            doc["$skipToken"] = str(start + top)
        return 200, doc, headers
