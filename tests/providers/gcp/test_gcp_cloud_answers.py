"""GCE's answers read as GCE means them, pinned by Google's own data: every status of the
installed compute_v1.Instance.Status, a DELETE answered 400 resourceNotReady while a VM goes
away, operations read only for the VMs asked about, the quota project user credentials
need, A3 Mega's SKU spellings and bundled local SSD, boot disk types per machine series,
and the custom role derived from the calls the adapter makes."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials as UserCredentials

from providers.base import (
    EndReason,
    InstanceState,
    Market,
    NotPermitted,
    Offering,
    SettingRefused,
)
from providers.gcp import GcpProvider
from providers.gcp.fake import FakeGcp
from providers.gcp.fake_catalog import IMAGE_FAMILIES, PROJECT
from providers.gcp.iam import permissions
from providers.gcp.machine_series import boot_disk_type
from providers.gcp.settings import DEFAULT_IMAGE
from tests.providers.gcp.test_gcp_launch import _req
from tests.support.gcp_harness import REGION, ZONE, settings

pytestmark = pytest.mark.timeout(60)

README = Path("providers/gcp/README.md")
# What describe() reads each status as; a VM on its way down is ended (its zone operations
# say why), never a new launch.
EXPECTED = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "PENDING": InstanceState.PENDING,  # flex-start waiting for capacity
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.RUNNING,
    "PENDING_STOP": InstanceState.ENDED,
    "STOPPING": InstanceState.ENDED,
    "DEPROVISIONING": InstanceState.ENDED,
    "STOPPED": InstanceState.ENDED,
    "TERMINATED": InstanceState.ENDED,
    "SUSPENDING": InstanceState.ENDED,
    "SUSPENDED": InstanceState.ENDED,
}


def test_every_instance_status_of_the_sdk_is_placed() -> None:
    statuses = {s.name for s in compute_v1.Instance.Status} - {"UNDEFINED_STATUS"}
    # Older releases of the SDK know fewer (1.20 has no PENDING or PENDING_STOP).
    assert statuses - set(EXPECTED) == set(), "google-cloud-compute has a status not placed"


@pytest.mark.parametrize("status", sorted(EXPECTED))
def test_instance_status(provider: GcpProvider, fake: FakeGcp, status: str) -> None:
    (inst,) = provider.launch(_req())
    fake.set_status(inst.id, status)
    (seen,) = provider.describe([inst.ref])
    assert seen.state is EXPECTED[status]


@pytest.mark.parametrize("status", ["PENDING_STOP", "STOPPING", "DEPROVISIONING"])
def test_a_vm_being_preempted_reads_as_interrupted(
    provider: GcpProvider, fake: FakeGcp, status: str
) -> None:
    (inst,) = provider.launch(_req())
    provider.describe([inst.ref])
    fake.preempt(inst.id, action="STOP")  # the compute.instances.preempted operation
    fake.set_status(inst.id, status)
    (seen,) = provider.describe([inst.ref])
    assert (seen.state, seen.end_reason) == (InstanceState.ENDED, EndReason.INTERRUPTED)


def test_deleting_a_vm_that_is_going_away_is_not_an_error(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    (inst,) = provider.launch(_req())
    fake.set_status(inst.id, "STOPPING")
    provider.terminate([inst.ref])  # GCE answers 400 resourceNotReady; the stop is re-sent
    assert len(fake.requests("DELETE", rf"/instances/{inst.id}$")) == 1
    fake.set_status(inst.id, "TERMINATED")
    provider.terminate([inst.ref])
    assert len(fake.requests("DELETE", rf"/instances/{inst.id}$")) == 2


def test_describe_reads_only_the_operations_of_its_vms(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    (inst,) = provider.launch(_req())
    fake.other_operations(ZONE, 1200)  # a busy project: other VMs' deletes and preemptions
    fake.preempt(inst.id)
    fake.ops_returned = 0
    (seen,) = provider.describe([inst.ref])
    assert seen.end_reason is EndReason.INTERRUPTED
    assert fake.ops_returned <= 5  # was every preemption and delete of the zone, paged
    (_, _, q, _) = fake.requests("GET", r"/operations$")[-1]
    assert inst.id in q["filter"][0] and "targetLink" in q["filter"][0]


def test_user_credentials_bill_the_catalog_to_a_quota_project(fake: FakeGcp) -> None:
    creds = UserCredentials(token="ya29.user-token")  # `gcloud auth application-default login`
    provider = GcpProvider(settings(fake, credentials="adc"), credentials=creds)
    provider.offerings()
    assert fake.quota_headers and set(fake.quota_headers) == {PROJECT}
    chosen = GcpProvider(settings(fake, credentials="adc", quota_project="billing-proj"),
                         credentials=UserCredentials(token="ya29.user-token"))  # fmt: skip
    fake.quota_headers.clear()
    chosen.offerings()
    assert set(fake.quota_headers) == {"billing-proj"}


def _by(offers: list[Offering]) -> dict[tuple[str, str], Offering]:
    return {(o.instance_type, o.market.value): o for o in offers if o.zone == ZONE}


def test_a3_mega_has_its_own_prices_and_a3_high_keeps_its_own(provider: GcpProvider) -> None:
    got = _by(provider.offerings())
    ssd, disk = 6000 * 0.08 / 730, 200 * 0.10 / 730  # 16 bundled local SSDs; the boot disk
    mega = got[("a3-megagpu-8g", "on-demand")]
    # "Nvidia H100 80GB Plus GPU" and "A3Plus Instance Core/Ram" (fixtures/skus.json).
    assert mega.price_per_hour == pytest.approx(
        8 * 10.34427625 + 208 * 0.029563 + 1872 * 0.00176867 + ssd + disk
    )
    assert (mega.gpu_model, mega.gpu_count) == ("H100", 8)
    mega_spot = got[("a3-megagpu-8g", "spot")]  # spelled "H100 80GB Mega" for Spot
    assert mega_spot.price_per_hour == pytest.approx(
        8 * 4.2252 + 208 * 0.0118 + 1872 * 0.00075253 + 6000 * 0.064 / 730 + disk
    )
    high = got[("a3-highgpu-8g", "on-demand")]
    assert high.price_per_hour == pytest.approx(
        8 * 4.20076 + 208 * 0.029563 + 1872 * 0.00176867 + ssd + disk
    )


def test_the_boot_disk_is_one_the_machine_series_takes(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    ultra = Offering("gcp", REGION, ZONE, "a3-ultragpu-8g", "H200", 8, 141.0, 224, 2952.0,
                     Market.SPOT, 30.0, datetime.now(UTC))  # fmt: skip
    provider.launch(_req(offering=ultra))
    ((_, _, _, body),) = fake.requests("POST", r"/instances$")
    disk = body["disks"][0]["initializeParams"]["diskType"]
    assert disk == f"zones/{ZONE}/diskTypes/hyperdisk-balanced"  # Hyperdisk-only series
    pinned = GcpProvider(settings(fake, disk_type="pd-balanced"), owner="tests")
    with pytest.raises(SettingRefused) as got:
        pinned.launch(_req(token="other", offering=ultra))
    assert got.value.key == "[providers.gcp] disk_type"
    assert len(fake.requests("POST", r"/instances$")) == 1  # refused before any call
    assert boot_disk_type("n1-standard-8", "auto") == "pd-balanced"
    assert not [o for o in pinned.offerings() if o.instance_type.startswith("a3-ultragpu")]


def test_a_refused_setting_names_its_key_and_a_denial_its_permission(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    fake.reject_insert[ZONE] = (
        400, "invalid",
        "Invalid value for field 'resource.disks[0].initializeParams.diskType': "
        f"'zones/{ZONE}/diskTypes/pd-extreme'.",
    )  # fmt: skip
    with pytest.raises(SettingRefused) as refused:
        provider.launch(_req())
    assert refused.value.key == "[providers.gcp] disk_type"
    # GCE's 403 names the permission ("Required '<permission>' permission for '<resource>'").
    fake.reject_insert[ZONE] = (
        403, "forbidden",
        f"Required 'compute.instances.create' permission for 'projects/{PROJECT}/zones/"
        f"{ZONE}/instances/x'",
    )  # fmt: skip
    with pytest.raises(NotPermitted) as denied:
        provider.launch(_req(token="t2"))
    assert denied.value.permission == "compute.instances.create"
    assert "providers/gcp/iam-role.json" in str(denied.value)


def test_the_default_image_is_a_current_deep_learning_vm_family() -> None:
    family = DEFAULT_IMAGE.rsplit("/", 1)[-1]
    assert family in IMAGE_FAMILIES and re.search(r"-(py3\d+|nvidia-5\d\d)$", family)


def shipped_role() -> dict:
    linked = re.search(r"\]\((iam-role[\w.-]*\.json)\)", README.read_text())
    assert linked, "the README ships no custom role"
    return json.loads((README.parent / linked.group(1)).read_text())


def test_the_shipped_role_grants_every_call_the_adapter_makes(fake: FakeGcp) -> None:
    provider = GcpProvider(settings(fake, external_ip=True, service_account="sa@p.iam"),
                           owner="tests")  # fmt: skip
    provider.offerings()
    (inst,) = provider.launch(_req())
    provider.describe([inst.ref])
    provider.list_tagged("tests")
    fake.preempt(inst.id, action="STOP")
    provider.describe([inst.ref])
    provider.terminate([inst.ref])
    # A gang in a compact placement policy, labelled per node, then collected.
    gang = provider.launch(_gang_req())
    provider.describe([i.ref for i in gang])
    provider.describe([i.ref for i in gang])
    provider.terminate([i.ref for i in gang])
    provider.terminate([t.ref for t in provider.list_tagged("tests")])
    provider.preflight()
    needed: set[str] = set()
    for method, path, _, body in fake.log:
        needed |= permissions(method, path, body)
    granted = set(shipped_role()["includedPermissions"])
    assert needed - granted == set()
    assert {"compute.instances.create", "compute.instances.setMetadata",
            "iam.serviceAccounts.actAs", "compute.subnetworks.useExternalIp"} <= needed  # fmt: skip
    assert {"compute.resourcePolicies.create", "compute.resourcePolicies.use",
            "compute.resourcePolicies.list", "compute.resourcePolicies.delete",
            "compute.instances.setLabels"} <= needed  # fmt: skip


def _gang_req():  # type: ignore[no-untyped-def]
    from tests.providers.gcp.test_gcp_gang import _gang

    return _gang(token="answers-gang", n=2)
