"""Offerings: shapes from the aggregated lists, prices composed from Billing Catalog SKUs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from providers.base import Market
from providers.gcp import GcpProvider
from providers.gcp.fake import FakeGcp
from providers.gcp.fake_catalog import sku
from providers.gcp.price_sheet import accelerator_key, gpu_key_from_tokens, parse_shape, parse_sku
from tests.support.gcp_harness import settings

pytestmark = pytest.mark.timeout(60)


def _by(offers):
    return {(o.zone, o.instance_type, o.market): o for o in offers}


# The boot disk every offering includes: 200 GiB (disk_size_gb) of pd-balanced at $0.100 per
# GiB-month (fixtures/skus.json), and the bundled local SSD at $0.080 (spot $0.064).
DISK = 200 * 0.10 / 730
SSD, SSD_SPOT = 0.08 / 730, 0.064 / 730


def test_offerings_compose_gpu_core_and_ram_skus(provider: GcpProvider, fake: FakeGcp) -> None:
    got = _by(provider.offerings())
    t4 = got[("us-central1-a", "n1-standard-8+1xnvidia-tesla-t4", Market.SPOT)]
    # 1 x T4 spot + 8 x N1 spot core + 30 GiB x N1 spot ram + the boot disk
    assert t4.price_per_hour == pytest.approx(0.1654 + 8 * 0.0116 + 30 * 0.00156 + DISK)
    assert (t4.gpu_model, t4.gpu_count, t4.gpu_memory_gb, t4.vcpus, t4.memory_gb) == (
        "T4", 1, 16.0, 8, 30.0,
    )  # fmt: skip
    od = got[("us-central1-a", "n1-standard-8+1xnvidia-tesla-t4", Market.ON_DEMAND)]
    assert od.price_per_hour == pytest.approx(0.35 + 8 * 0.031611 + 30 * 0.004237 + DISK)
    a2 = got[("us-central1-a", "a2-highgpu-1g", Market.ON_DEMAND)]
    assert a2.price_per_hour == pytest.approx(2.93391 + 12 * 0.031611 + 85 * 0.004237 + DISK)
    assert (a2.gpu_model, a2.gpu_memory_gb) == ("A100", 40.0)
    ultra = got[("us-central1-a", "a2-ultragpu-1g", Market.SPOT)]
    # a2-ultragpu-1g bundles one 375 GiB local SSD, billed on its own SKU.
    assert ultra.price_per_hour == pytest.approx(
        1.564 + 12 * 0.0158 + 170 * 0.00212 + 375 * SSD_SPOT + DISK
    )
    assert (ultra.gpu_model, ultra.gpu_memory_gb) == ("A100", 80.0)  # the 80GB SKU, not 40GB
    g2 = got[("us-central1-b", "g2-standard-4", Market.SPOT)]
    assert g2.price_per_hour == pytest.approx(0.2343 + 4 * 0.0105 + 16 * 0.00123 + DISK)
    a3 = got[("us-central1-a", "a3-highgpu-8g", Market.ON_DEMAND)]
    assert a3.price_per_hour == pytest.approx(
        8 * 4.20076 + 208 * 0.029563 + 1872 * 0.00176867 + 6000 * SSD + DISK
    )
    assert (a3.gpu_model, a3.gpu_count) == ("H100", 8)
    # Only configured regions; no e2 (not a GPU family); every shape both markets.
    assert {o.region for o in got.values()} == {"us-central1"}
    assert not [k for k in got if k[1].startswith("e2-")]


def test_n1_shapes_follow_the_gpu_count_and_vcpu_limits(provider: GcpProvider) -> None:
    names = {o.instance_type for o in provider.offerings() if o.zone == "us-central1-a"}
    # V100: one GPU allows at most 12 vCPUs, so n1-standard-16 needs two.
    assert "n1-standard-8+1xnvidia-tesla-v100" in names
    assert "n1-standard-16+1xnvidia-tesla-v100" not in names
    assert "n1-standard-16+2xnvidia-tesla-v100" in names
    assert "n1-standard-4+8xnvidia-tesla-v100" in names
    assert "n1-standard-4+8xnvidia-tesla-t4" not in names  # T4: 1, 2 or 4
    # us-central1-b has no V100 at all.
    b = {o.instance_type for o in provider.offerings() if o.zone == "us-central1-b"}
    assert not [n for n in b if "v100" in n] and "n1-standard-4+4xnvidia-tesla-t4" in b
    assert parse_shape("n1-standard-16+2xnvidia-tesla-v100") == (
        "n1-standard-16", "nvidia-tesla-v100", 2,
    )  # fmt: skip


def test_every_page_is_read(provider: GcpProvider, fake: FakeGcp) -> None:
    provider.offerings()
    sku_pages = fake.requests("GET", r"/skus$")
    assert len(sku_pages) == -(-len(fake.skus) // fake.sku_page_size) > 2
    assert sku_pages[0][2]["currencyCode"] == ["USD"]
    assert len(fake.requests("GET", r"aggregated/machineTypes")) > 3
    mt = fake.requests("GET", r"aggregated/machineTypes")[0][2]
    assert mt["filter"] == ['name eq "(n1|a2|a3|g2)-.*"']
    assert len(fake.requests("GET", r"aggregated/acceleratorTypes")) > 2


def test_decoy_skus_are_ignored() -> None:
    def raw(desc, group="GPU", usage="OnDemand", family="Compute", unit="h"):
        d = sku(desc, group, usage, 1.0, ["us-central1"], family=family, unit=unit)
        from google.cloud import billing_v1

        return billing_v1.Sku.from_json(__import__("json").dumps(d), ignore_unknown_fields=True)

    assert (
        parse_sku(raw("Commitment v1: Nvidia Tesla T4 GPU in Americas", usage="Commit1Yr")) is None
    )
    assert parse_sku(raw("Storage PD Capacity", family="Storage")) is None
    assert parse_sku(raw("Custom Instance Core running in Americas", "N1Standard")) is None
    assert parse_sku(raw("Nvidia Tesla T4 Virtual Workstation GPU running in Americas")) is None
    assert (
        parse_sku(raw("Spot Preemptible Nvidia Tesla T4 GPU running in Americas")) is None
    )  # usage
    a = parse_sku(
        raw("Spot Preemptible Nvidia Tesla A100 GPU running in Americas", usage="Preemptible")
    )
    b = parse_sku(raw("Nvidia Tesla A100 80GB GPU attached to Spot Preemptible VMs running in Iowa",
                      usage="Preemptible"))  # fmt: skip
    assert a is not None and b is not None and a.market is b.market is Market.SPOT
    assert (
        a.gpu
        == accelerator_key("nvidia-tesla-a100")
        != b.gpu
        == accelerator_key("nvidia-a100-80gb")
    )
    ram = parse_sku(raw("Spot Preemptible G2 Instance Ram running in Americas", "RAM",
                        "Preemptible", unit="GiBy.h"))  # fmt: skip
    assert ram is not None and (ram.kind, ram.family) == ("ram", "G2")
    assert gpu_key_from_tokens(["NVIDIA", "H100", "80GB", "MEGA", "GPU"]) != accelerator_key(
        "nvidia-h100-80gb"
    )


def test_spot_above_on_demand_is_reported_not_used(provider: GcpProvider, fake: FakeGcp) -> None:
    for s in fake.skus:
        if s["description"].startswith("Nvidia L4 GPU attached to Spot"):
            s["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {
                "currencyCode": "USD", "units": "0", "nanos": 900000000,
            }  # fmt: skip
    got = _by(provider.offerings())
    assert ("us-central1-a", "g2-standard-4", Market.SPOT) not in got
    assert ("us-central1-a", "g2-standard-4", Market.ON_DEMAND) in got
    events = [e.message for e in provider.drain_events()]
    assert any("g2-standard-4" in m and "above its on-demand" in m for m in events)


def test_prices_are_cached_and_a_failing_region_keeps_its_offerings(fake: FakeGcp) -> None:
    from tests.support.conformance import StepClock

    clock = StepClock()
    p = GcpProvider(
        settings(fake, regions=["us-central1", "europe-west4"], price_refresh="5m"),
        owner="t", clock=clock,
    )  # fmt: skip
    first = p.offerings()
    assert {o.region for o in first} == {"us-central1"}  # no SKUs for europe-west4
    assert any("europe-west4" in e.message for e in p.drain_events())
    n = len(fake.requests("GET", r"/skus$"))
    assert p.offerings() == first and len(fake.requests("GET", r"/skus$")) == n  # cached
    clock.advance(400)
    fake.fail_skus = True
    again = p.offerings()
    assert {(o.pool, o.price_per_hour) for o in again} == {
        (o.pool, o.price_per_hour) for o in first
    }
    assert any("keeping the offerings" in e.message for e in p.drain_events())


def test_unreachable_zone_keeps_the_regions_last_offerings(fake: FakeGcp) -> None:
    from tests.support.conformance import StepClock

    clock = StepClock()
    p = GcpProvider(settings(fake, catalog_refresh="1m"), owner="t", clock=clock)
    first = p.offerings()
    clock.advance(600)
    fake.unreachable.add("us-central1-b")
    again = p.offerings()
    assert {o.pool for o in again} == {o.pool for o in first}
    msgs = [e.message for e in p.drain_events()]
    assert any("us-central1-b" in m and "UNREACHABLE" in m for m in msgs)


def test_zone_and_machine_type_allow_lists(fake: FakeGcp) -> None:
    p = GcpProvider(settings(fake, zones=["us-central1-b"], machine_types=["g2-*"]), owner="t")
    offers = p.offerings()
    assert {(o.zone, o.instance_type) for o in offers} == {("us-central1-b", "g2-standard-4")}


def test_unit_price_reads_units_and_nanos() -> None:
    s = SimpleNamespace  # parse_sku works on anything shaped like billing_v1.Sku
    rate = s(start_usage_amount=0, unit_price=s(currency_code="USD", units=1, nanos=250000000))
    raw = s(
        description="Nvidia Tesla V100 GPU running in Americas", sku_id="x",
        category=s(resource_family="Compute", resource_group="GPU", usage_type="OnDemand"),
        service_regions=["us-central1"],
        pricing_info=[s(pricing_expression=s(usage_unit="h", tiered_rates=[rate]))],
    )  # fmt: skip
    got = parse_sku(raw)
    assert got is not None and got.price == 1.25 and got.gpu is not None
    assert got.gpu.model == "V100"
