"""The GCP conformance harness: GcpProvider (real google-cloud-compute and
google-cloud-billing clients) over the loopback fake in fake_gcp.py.

Standalone (the conformance suite cannot use this package's fixtures): each harness starts
its own fake on 127.0.0.1:0 and stops it in cleanup. Operations and instances advance on
reads, not on time, so `wait` is a no-op.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from providers.base import Market, Offering, ResourceRef
from providers.gcp import GcpProvider, GcpSettings
from providers.gcp.fake import PROJECT, FakeGcp
from tests.support.conformance import OWNER, Harness

REGION = "us-central1"
ZONE = "us-central1-a"
T4_SHAPE = "n1-standard-4+1xnvidia-tesla-t4"


def settings(fake: FakeGcp, **extra: Any) -> GcpSettings:
    return GcpSettings.model_validate({
        "project": PROJECT, "regions": [REGION], "api_endpoint": fake.url,
        "billing_endpoint": fake.url, "credentials": "anonymous", "timeout": "10s", **extra,
    })  # fmt: skip


def t4_offering(market: Market = Market.SPOT, zone: str = ZONE) -> Offering:
    return Offering(
        "gcp", REGION, zone, T4_SHAPE, "T4", 1, 16.0, 4, 15.0, market, 0.2352,
        datetime.now(UTC),
    )  # fmt: skip


def gcp_harness(_: Path) -> Harness:
    fake = FakeGcp()
    provider = GcpProvider(settings(fake), owner=OWNER)
    offer = t4_offering()

    def capacity() -> None:
        fake.fail_insert[ZONE] = (
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            f"The zone 'projects/{PROJECT}/zones/{ZONE}' does not have enough resources "
            "available to fulfill the request.",
            503,
            1,
        )

    h = Harness(
        provider, offer, inject_capacity=capacity, wait=lambda _s: None,
        inject_gang_capacity=lambda n: fake.capacity.__setitem__(ZONE, n),
        unknown_ref=ResourceRef("sw-never-launched-0123456789ab", REGION, ZONE),
        visible_within=30,
    )  # fmt: skip
    h.cleanup.append(fake.close)
    return h
