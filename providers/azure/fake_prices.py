"""A loopback Retail Prices API fake: the OData subset the adapter uses (`eq`, `and`,
`contains`), NextPageLink paging and injectable HTTP 429s (Retry-After: 0).

Pointing the adapter at it: `prices = FakePrices(fake_catalog.price_rows())` listens at once;
`prices.url` is the full endpoint (.../api/retail/prices), so `[providers.azure]
prices_url = prices.url` is all it takes (the public API needs no credentials, nor does this
fake). tests/support/azure_harness.py does this beside the ARM fake; `prices.close()` stops it.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

_CLAUSE = re.compile(r"^(?:(\w+) eq '([^']*)'|contains\((\w+),\s*'([^']*)'\))$")


def matches(item: dict[str, Any], flt: str) -> bool:
    for clause in (c.strip() for c in flt.split(" and ") if c.strip()):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"unsupported filter clause {clause!r}")
        if m.group(1):  # the filter key is priceType; the item field is "type"
            field = "type" if m.group(1) == "priceType" else m.group(1)
            if str(item.get(field)) != m.group(2):  # case-sensitive, as the real API
                return False
        elif m.group(4) not in str(item.get(m.group(3), "")):
            return False
    return True


class FakePrices:
    def __init__(self, items: list[dict[str, Any]], page_size: int = 100) -> None:
        self.items = items
        self.page_size = page_size
        self.throttle = 0  # answer this many requests with 429
        self.fail = False  # answer 500
        self.requests: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/retail/prices"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str) -> tuple[int, dict[str, Any] | None, dict[str, str]]:
        self.requests.append(path)
        if self.throttle > 0:
            self.throttle -= 1
            return 429, None, {"Retry-After": "0"}
        if self.fail:
            return 500, None, {}
        q = parse_qs(urlparse(path).query)
        flt = (q.get("$filter") or [""])[0]
        skip = int((q.get("$skip") or ["0"])[0])
        try:
            rows = [i for i in self.items if matches(i, flt)]
        except ValueError as e:
            return 400, {"Error": {"Code": "BadRequest", "Message": str(e)}}, {}
        page = rows[skip : skip + self.page_size]
        nxt = None
        if skip + self.page_size < len(rows):
            nxt = self.url + "?" + urlencode({"$filter": flt, "$skip": skip + self.page_size})
        doc = {
            "BillingCurrency": "USD", "CustomerEntityId": "Default",
            "CustomerEntityType": "Retail", "Items": page, "NextPageLink": nxt,
            "Count": len(page),
        }  # fmt: skip
        return 200, doc, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, doc, headers = fake.answer(self.path)
                data = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler
