"""Offerings: GPU sizes from resource SKUs (restrictions, spot capability, families) priced
from the Retail Prices fake (Linux only, paging, 429), cached, stale on failure."""

from __future__ import annotations

import pytest

from providers.azure.fake_catalog import figures
from providers.azure.fake_prices import matches
from providers.azure.prices import location_filter
from providers.azure.skus import gpu_of
from providers.base import Market

pytestmark = pytest.mark.timeout(60)


def _by(offers):  # type: ignore[no-untyped-def]
    return {(o.instance_type, o.zone, o.market): o for o in offers}


def test_offerings_are_priced_from_linux_consumption_rows(provider, prices) -> None:
    before = len(prices.requests)
    offers = provider.offerings()
    got = _by(offers)
    fig = figures()
    t4 = got[("Standard_NC4as_T4_v3", "eastus-1", Market.SPOT)]
    # The newest Linux spot row: not the Windows, " Win", older or Low Priority ones.
    assert t4.price_per_hour == pytest.approx(fig[("Standard_NC4as_T4_v3", "eastus")][4])
    od = got[("Standard_NC4as_T4_v3", "westus2-2", Market.ON_DEMAND)]
    assert od.price_per_hour == pytest.approx(fig[("Standard_NC4as_T4_v3", "westus2")][3])
    assert (t4.cloud, t4.region, t4.gpu_model, t4.gpu_count, t4.gpu_memory_gb) == (
        "azure", "eastus", "T4", 1, 16.0,
    )  # fmt: skip
    assert (t4.vcpus, t4.memory_gb) == (4, 28)
    a100 = got[("Standard_NC24ads_A100_v4", "eastus-1", Market.SPOT)]
    assert (a100.gpu_model, a100.gpu_memory_gb) == ("A100", 80.0)
    nd = got[("Standard_ND96asr_v4", "eastus-2", Market.SPOT)]
    assert (nd.gpu_model, nd.gpu_count, nd.gpu_memory_gb) == ("A100", 8, 40.0)
    assert got[("Standard_NC6s_v3", "eastus-3", Market.SPOT)].gpu_model == "V100"
    assert {o.instance_type for o in offers} >= {"Standard_ND96isr_H100_v5"}
    assert not [o for o in offers if o.instance_type == "Standard_D4s_v5"]  # no GPU
    # Paging: 49 Linux/Windows Consumption rows per location at 10 a page.
    assert len(prices.requests) - before >= 2 * 5
    assert provider.drain_events() == []


def test_restrictions_and_spot_capability(provider) -> None:
    got = _by(provider.offerings())
    # A Location restriction removes the size from that location only.
    assert not [k for k in got if k[0] == "Standard_NC6s_v3" and k[1].startswith("westus2")]
    assert ("Standard_NC6s_v3", "eastus-1", Market.ON_DEMAND) in got
    # A Zone restriction removes the zones it names.
    zones = {k[1] for k in got if k[0] == "Standard_NC24ads_A100_v4" and k[1].startswith("eastus")}
    assert zones == {"eastus-1", "eastus-2"}
    # LowPriorityCapable False: on-demand only.
    h100 = {k[2] for k in got if k[0] == "Standard_ND96isr_H100_v5"}
    assert h100 == {Market.ON_DEMAND}
    # A size without zones is one regional pool.
    nc_h100 = {k[1] for k in got if k[0] == "Standard_NC40ads_H100_v5"}
    assert nc_h100 == {"eastus", "westus2"}
    assert got[("Standard_NC40ads_H100_v5", "eastus", Market.SPOT)].gpu_memory_gb == 94.0


def test_429_is_waited_out_within_the_same_refresh(provider, prices) -> None:
    prices.throttle = 2
    offers = provider.offerings()
    assert offers and prices.throttle == 0
    assert any("429" in e.message for e in provider.drain_events())


def test_cached_then_a_failing_location_keeps_its_last_offerings(make, prices) -> None:
    p = make(price_refresh="1h")
    first = p.offerings()
    n = len(prices.requests)
    assert p.offerings() == first and len(prices.requests) == n  # cached
    q = make(price_refresh=0)
    fresh = q.offerings()
    prices.fail = True
    stale = q.offerings()
    assert {o.pool for o in stale} == {o.pool for o in fresh}
    events = [e.message for e in q.drain_events()]
    assert any("keeping the offerings" in m and "eastus" in m for m in events)
    assert any("westus2" in m for m in events)


def test_no_location_at_all_raises(make, prices) -> None:
    from providers.base import ProviderError

    prices.fail = True
    with pytest.raises(ProviderError):
        make().offerings()


def test_size_allow_list(make) -> None:
    offers = make(vm_sizes=["Standard_NC*_T4_v3"]).offerings()
    assert {o.instance_type for o in offers} == {"Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3"}


@pytest.mark.parametrize(
    ("size", "want"),
    [
        ("Standard_NC4as_T4_v3", ("T4", 16.0)),
        ("Standard_NC64as_T4_v3", ("T4", 16.0)),
        ("Standard_NC24ads_A100_v4", ("A100", 80.0)),
        ("Standard_ND96asr_v4", ("A100", 40.0)),
        ("Standard_ND96amsr_A100_v4", ("A100", 80.0)),
        ("Standard_NC6s_v3", ("V100", 16.0)),
        ("Standard_NC24rs_v3", ("V100", 16.0)),
        ("Standard_ND40rs_v2", ("V100", 32.0)),
        ("Standard_ND96isr_H100_v5", ("H100", 80.0)),
        ("Standard_NC80adis_H100_v5", ("H100", 94.0)),
        ("Standard_ND96isr_H200_v5", ("H200", 141.0)),
        ("Standard_NC16ads_A10_v4", ("A10", 24.0)),
        ("Standard_NV6ads_A10_v5", None),  # a sixth of a GPU
        ("Standard_D4s_v5", None),
    ],
)
def test_gpu_model_comes_from_the_family(size: str, want) -> None:  # type: ignore[no-untyped-def]
    assert gpu_of(size) == want


def test_the_price_filter_is_what_the_fake_understands() -> None:
    row = {"serviceName": "Virtual Machines", "type": "Consumption", "armRegionName": "eastus",
           "armSkuName": "Standard_NC4as_T4_v3"}  # fmt: skip
    assert matches(row, location_filter("eastus"))
    assert not matches({**row, "type": "Reservation"}, location_filter("eastus"))
