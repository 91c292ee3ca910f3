"""A loopback stand-in for the AWS Price List API (awsJson1.1 GetProducts), stdlib only.

Pointing the real SDK at it: `fake = FakePricing().start()` listens on `fake.url`; configure
`[providers.aws] pricing_endpoint_url = fake.url` and boto3's pricing client sends GetProducts
there (any credentials will do: signatures are not checked). Fill `fake.prices[(region,
instance_type)] = usd` with the on-demand prices to answer. EC2 itself is faked by moto's
server (`endpoint_url`), as tests/support/aws_fixtures.py `make_provider` and
tests/support/aws_harness.py do. `fake.stop()` stops it.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def product(region: str, instance_type: str, usd: float, operation: str = "RunInstances") -> str:
    """One PriceList entry as the real API returns it: a JSON document in a string."""
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "operation": operation,
                },
                "sku": f"SKU{abs(hash((region, instance_type, operation))) % 10**8}",
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    "T1": {
                        "priceDimensions": {
                            "D1": {"unit": "Hrs", "pricePerUnit": {"USD": f"{usd:.6f}"}}
                        }
                    }
                }
            },
        }
    )


def _holds(flt: dict[str, Any], attrs: dict[str, str]) -> bool:
    """One Filter as the Price List API applies it (API reference, Filter.Type): TERM_MATCH
    and EQUALS an exact value, CONTAINS a substring, ANY_OF and NONE_OF a comma-separated
    list of values. Fields the fake's products do not carry are taken as matching (the
    real products all are Linux, shared, NA, Used)."""
    field, value, kind = flt["Field"], str(flt["Value"]), flt.get("Type", "TERM_MATCH")
    if field not in attrs:
        return True
    have = attrs[field]
    if kind in ("TERM_MATCH", "EQUALS"):
        return have == value
    if kind == "CONTAINS":
        return value in have
    choices = [v.strip() for v in value.split(",")]
    if kind == "ANY_OF":
        return have in choices
    if kind == "NONE_OF":
        return have not in choices
    raise ValueError(f"unknown filter type {kind}")


class FakePricing:
    """Serves GetProducts from `prices[(region, type)]`, paging with MaxResults/NextToken."""

    def __init__(self) -> None:
        self.prices: dict[tuple[str, str], float] = {}
        self.requests: list[dict[str, Any]] = []
        self.fail_with: str | None = None  # e.g. "AccessDeniedException"
        self.page_size_seen: list[int] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                target = self.headers.get("X-Amz-Target", "")
                fake.requests.append(body)
                if target != "AWSPriceListService.GetProducts":
                    return self._send(400, {"__type": "UnknownOperationException"})
                if fake.fail_with:
                    return self._send(400, {"__type": fake.fail_with, "message": "denied"})
                self._send(200, fake.answer(body))

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        docs: list[str] = []
        for (region, itype), usd in sorted(self.prices.items()):
            attrs = {"regionCode": region, "instanceType": itype}
            if not all(_holds(f, attrs) for f in body.get("Filters", [])):
                continue
            docs.append(product(region, itype, usd))
            # A licensed (Windows/SQL) product that the filters would let through must be
            # ignored by the client.
            docs.append(product(region, itype, usd / 10, operation="RunInstances:0002"))
        size = int(body.get("MaxResults") or 100)
        self.page_size_seen.append(size)
        start = int(body.get("NextToken") or 0)
        page: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": docs[start : start + size]}
        if start + size < len(docs):
            page["NextToken"] = str(start + size)
        return page

    def start(self) -> FakePricing:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        self.prices.clear()
        self.requests.clear()
        self.page_size_seen.clear()
        self.fail_with = None
