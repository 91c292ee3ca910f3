"""Launch: the wire fields of a Spot VM, idempotency by VM name, error mapping now and later."""

from __future__ import annotations

import base64

import pytest

from providers.azure.fake_arm import ArmError
from providers.azure.instances import TAG_MAX_PRICE, TAG_TOKEN, vm_name
from providers.base import (
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FailureKind,
    FatalError,
    InstanceState,
    LaunchRejected,
    Market,
    QuotaExceeded,
)
from tests.support.azure_fixtures import OWNER, request_for
from tests.support.azure_harness import t4_offering

pytestmark = pytest.mark.timeout(60)


@pytest.mark.slow
def test_spot_launch_sends_the_right_wire_fields(make, arm, rg) -> None:
    ident = (
        f"/subscriptions/x/resourceGroups/{rg}/providers/Microsoft.ManagedIdentity/"
        "userAssignedIdentities/sw"
    )
    p = make(identity=ident, os_disk_gb=256, image="Canonical:ubuntu-24_04-lts:server:latest")
    req = request_for()
    (inst,) = p.launch(req)
    assert inst.state is InstanceState.PENDING and inst.scope == rg
    assert inst.id == vm_name(req.token) and inst.market is Market.SPOT
    body = arm.vm_puts()[-1]
    props = body["properties"]
    assert props["priority"] == "Spot" and props["evictionPolicy"] == "Delete"
    assert props["billingProfile"] == {"maxPrice": -1}
    assert props["hardwareProfile"] == {"vmSize": "Standard_NC4as_T4_v3"}
    assert body["location"] == "eastus" and body["zones"] == ["1"]
    assert body["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {ident: {}}}
    osd = props["storageProfile"]["osDisk"]
    assert osd["diskSizeGB"] == 256 and osd["deleteOption"] == "Delete"
    assert props["storageProfile"]["imageReference"] == {
        "publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest",
    }  # fmt: skip
    (nic,) = props["networkProfile"]["networkInterfaces"]
    assert nic["id"].endswith(f"/networkInterfaces/{inst.id}-nic")
    assert nic["properties"]["deleteOption"] == "Delete"
    tags = body["tags"]
    assert tags[TAG_OWNER] == OWNER and tags["spotwise-job"] == "j1"
    assert tags["spotwise-attempt"] == "j1-2" and tags[TAG_TOKEN] == req.token
    script = base64.b64decode(props["osProfile"]["customData"]).decode()
    assert script.startswith("#!/bin/bash")
    assert "export SPOTWISE_CHECKPOINT_URI=s3://bucket/j1" in script
    assert "export SPOTWISE_CLOUD=azure" in script
    assert "argv=( python3 train.py --epochs 3 )" in script
    assert "python3 -m trainer.outcome" in script and "s3://bucket/j1/exits/2.json" in script
    # The NIC was created first, in the configured subnet, tagged like the VM.
    nic_doc = next(
        b for m, path, b in arm.requests if m == "PUT" and path.endswith(f"{inst.id}-nic")
    )
    ipconf = nic_doc["properties"]["ipConfigurations"][0]["properties"]
    assert ipconf["subnet"]["id"].endswith("/subnets/default")
    assert nic_doc["tags"][TAG_OWNER] == OWNER


def test_the_same_token_gives_one_vm(provider, arm, rg) -> None:
    req = request_for()
    first = provider.launch(req)
    again = provider.launch(req)
    assert [i.id for i in again] == [i.id for i in first]
    assert (
        arm.names("virtualMachines")
        and len([n for n in arm.names("virtualMachines") if n == first[0].id]) == 1
    )
    puts = [b for m, p, b in arm.requests if m == "PUT" and p.endswith(first[0].id)]
    assert len(puts) == 1
    assert [i.id for i in provider.find_by_token(req.token)] == [first[0].id]
    assert provider.find_by_token(req.token, "westus2") == []


def test_on_demand_and_max_price(provider, arm) -> None:
    provider.launch(request_for(t4_offering(Market.ON_DEMAND)))
    props = arm.vm_puts()[-1]["properties"]
    assert props["priority"] == "Regular" and "evictionPolicy" not in props
    req = request_for()
    req = request_for(tags={**req.tags, TAG_MAX_PRICE: "0.25"})
    provider.launch(req)
    assert arm.vm_puts()[-1]["properties"]["billingProfile"] == {"maxPrice": 0.25}


def test_a_jobs_price_cap_goes_to_arm_as_the_billing_profile_max_price(make, arm) -> None:
    """billingProfile.maxPrice is a number of USD per hour (azure-mgmt-compute's
    BillingProfile model maps it so); the lower of the job's cap and the configured
    spot_max_price wins, and -1 (up to on-demand) stays when neither sets one."""
    from azure.mgmt.compute.models import BillingProfile

    model = BillingProfile(max_price=0.75)  # its wire shape, as msrest (33) or TypeSpec writes it
    wire = model.serialize() if hasattr(model, "serialize") else dict(model)
    assert wire == {"maxPrice": 0.75}
    make().launch(request_for(max_price_per_hour=0.75))
    assert arm.vm_puts()[-1]["properties"]["billingProfile"] == {"maxPrice": 0.75}
    make(spot_max_price=0.5).launch(request_for(max_price_per_hour=0.75))
    assert arm.vm_puts()[-1]["properties"]["billingProfile"] == {"maxPrice": 0.5}


def test_public_ip_is_created_and_attached(make, arm, rg) -> None:
    p = make(public_ip=True)
    (inst,) = p.launch(request_for())
    assert f"{inst.id}-ip" in arm.names("publicIPAddresses")


@pytest.mark.parametrize(
    ("status", "code", "message", "exc"),
    [
        (409, "SkuNotAvailable", "not available in eastus", CapacityUnavailable),
        (409, "ZonalAllocationFailed", "no room in zone 1", CapacityUnavailable),
        (409, "OverconstrainedAllocationRequest", "constraints", CapacityUnavailable),
        (409, "OperationNotAllowed", "exceeding approved LowPriorityCores quota", QuotaExceeded),
        (400, "InvalidParameter", "customData is invalid", LaunchRejected),
        (403, "AuthorizationFailed", "no permission", FatalError),
    ],
)
@pytest.mark.slow
def test_synchronous_errors_are_typed(provider, arm, rg, status, code, message, exc) -> None:  # type: ignore[no-untyped-def]
    arm.fail_create = ArmError(status, code, message)
    req = request_for()
    with pytest.raises(exc) as info:
        provider.launch(req)
    if isinstance(info.value, CapacityUnavailable):
        assert info.value.pool == req.offering.pool
    if exc is QuotaExceeded:
        assert isinstance(info.value, QuotaExceeded)
    elif exc is CapacityUnavailable:
        assert not isinstance(info.value, QuotaExceeded)
    # The NIC made for it is not left behind.
    assert f"{vm_name(req.token)}-nic" not in arm.names("networkInterfaces")


def test_a_bad_request_never_reaches_arm(provider, arm) -> None:
    n = len(arm.requests)
    with pytest.raises(LaunchRejected):
        provider.launch(request_for(env={"NOT A NAME": "x"}))
    with pytest.raises(LaunchRejected):
        provider.launch(request_for(command=[]))
    assert not [r for r in arm.requests[n:] if r[0] == "PUT"]


def test_an_allocation_failure_arriving_later_is_launch_failed_capacity(provider, arm) -> None:
    arm.fail_later = ("AllocationFailed", "Allocation failed. We do not have sufficient capacity.")
    req = request_for()
    (inst,) = provider.launch(req)
    assert inst.state is InstanceState.PENDING
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.LAUNCH_FAILED
    assert seen.failure is not None and seen.failure.kind is FailureKind.CAPACITY
    assert seen.failure.pool == req.offering.pool and "AllocationFailed" in seen.failure.message
    assert isinstance(seen.failure.to_error(), CapacityUnavailable)


def test_a_quota_failure_arriving_later(provider, arm) -> None:
    arm.fail_later = ("QuotaExceeded", "Operation results in exceeding quota limits of Core.")
    (inst,) = provider.launch(request_for())
    (seen,) = provider.describe([inst.ref])
    assert seen.failure is not None and seen.failure.kind is FailureKind.QUOTA


def test_wrong_cloud_location_or_count(provider) -> None:
    from dataclasses import replace

    o = t4_offering()
    with pytest.raises(FatalError):
        provider.launch(request_for(replace(o, cloud="aws")))
    with pytest.raises(FatalError):
        provider.launch(request_for(replace(o, region="northeurope", zone="northeurope-1")))
    with pytest.raises(LaunchRejected):
        provider.launch(request_for(count=33))  # more nodes than one gang launches
