"""The Azure conformance harness: AzureProvider (real azure-mgmt clients) over the loopback
ARM and Retail Prices fakes. Standalone, so tests/providers/test_conformance.py can use it:
the fakes start lazily once per process and stop at exit."""

from __future__ import annotations

import atexit
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from providers.azure import AzureProvider, AzureSettings
from providers.azure.fake_arm import FakeArm
from providers.azure.fake_catalog import price_rows, skus
from providers.azure.fake_prices import FakePrices
from providers.base import Market, Offering, ResourceRef
from tests.support.conformance import OWNER, Harness

SUB = "00000000-0000-4000-8000-000000000001"
LOCATION = "eastus"
_lock = threading.Lock()
_fakes: dict[str, Any] = {}


def fakes() -> tuple[FakeArm, FakePrices]:
    with _lock:
        if not _fakes:
            _fakes["arm"] = FakeArm(skus(), SUB)
            _fakes["prices"] = FakePrices(price_rows(), page_size=10)
            atexit.register(_fakes["arm"].close)
            atexit.register(_fakes["prices"].close)
        return _fakes["arm"], _fakes["prices"]


def settings_for(arm: FakeArm, prices: FakePrices, rg: str, **extra: Any) -> AzureSettings:
    data: dict[str, Any] = {
        "subscription_id": SUB, "resource_group": rg, "locations": ["eastus", "westus2"],
        "base_url": arm.url, "prices_url": prices.url, "credentials": "anonymous",
        "subnet_id": f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Network/"
                     "virtualNetworks/vnet/subnets/default",
        "polling_interval": 0, "max_retries": 0, "retry_backoff": 0,
        "connect_timeout": "2s", "read_timeout": "10s",
        "ssh_public_key": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7test spotwise-test",
    }  # fmt: skip
    data.update(extra)
    return AzureSettings.model_validate(data)


def t4_offering(market: Market = Market.SPOT, zone: str = "eastus-1") -> Offering:
    return Offering(
        "azure", LOCATION, zone, "Standard_NC4as_T4_v3", "T4", 1, 16.0, 4, 28, market,
        0.204246, datetime.now(UTC),
    )  # fmt: skip


def azure_harness(tmp_path: Path) -> Harness:
    arm, prices = fakes()
    rg = "rg-conf-" + uuid.uuid4().hex[:8]  # one resource group per test: no cross-talk
    provider = AzureProvider(settings_for(arm, prices, rg), owner=OWNER)

    def capacity() -> None:
        arm.fail_later = ("AllocationFailed", "Allocation failed. We do not have capacity.")

    h = Harness(
        provider, t4_offering(), inject_capacity=capacity,
        inject_gang_capacity=lambda n: arm.capacity.__setitem__("Standard_NC4as_T4_v3", n),
        unknown_ref=ResourceRef("sw-000000000000000000000000", LOCATION, "eastus-1", rg),
        visible_within=10,
    )  # fmt: skip
    h.cleanup.append(lambda: provider.terminate([t.ref for t in provider.list_tagged(OWNER)]))
    h.cleanup.append(arm.capacity.clear)  # the ARM is shared by the process's tests
    return h
