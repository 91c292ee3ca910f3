"""Gangs on Azure through the real azure-mgmt clients against the loopback ARM: N VMs in one
proximity placement group, every node with its rank and node 0's private address, all or
nothing when a node is refused, one node replaced alone into the group, the group left to
leak collection once its VMs are gone."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from providers.azure.fake_arm import ArmError, FakeArm
from providers.azure.gangs import group_name
from providers.azure.instances import vm_name
from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FailureKind,
    InstanceState,
    LaunchRequest,
    ResourceKind,
)
from tests.support.azure_fixtures import OWNER
from tests.support.azure_harness import t4_offering

pytestmark = pytest.mark.timeout(60)


def _gang(token: str = "j-1-a1", n: int = 3, **kw) -> LaunchRequest:
    fields = {
        "token": token,
        "offering": t4_offering(),
        "command": ["python", "-m", "trainer", "--nnodes", str(n)],
        "env": {"SPOTWISE_JOB_ID": "j-1", "SPOTWISE_ATTEMPT": "1", "SPOTWISE_NNODES": str(n),
                "SPOTWISE_RDZV_ID": "j-1-a1"},
        "tags": {TAG_JOB: "j-1", TAG_ATTEMPT: "j-1-a1", TAG_OWNER: OWNER},
        "count": n,
        "placement_group": "spotwise-j-1-a1",
    }  # fmt: skip
    fields.update(kw)
    return LaunchRequest(**fields)  # type: ignore[arg-type]


def _script(put: dict) -> str:
    return base64.b64decode(put["properties"]["osProfile"]["customData"]).decode()


def _env(script: str, name: str) -> str:
    m = re.search(rf"^export {name}=(\S+)$", script, re.M)
    return m.group(1).strip("'") if m else ""


def test_a_gang_is_n_vms_in_one_proximity_placement_group(make, arm: FakeArm, rg: str) -> None:
    p = make()
    insts = p.launch(_gang())
    base = vm_name("j-1-a1")
    assert [i.id for i in insts] == [f"{base}-n{k}" for k in range(3)]
    assert [i.node for i in insts] == [0, 1, 2] and insts[0].tags[TAG_NODE] == "0"
    ppg = arm.res["proximityplacementgroups"][(rg.lower(), group_name("spotwise-j-1-a1"))]
    assert ppg["properties"]["proximityPlacementGroupType"] == "Standard"
    assert ppg["properties"]["intent"] == {"vmSizes": ["Standard_NC4as_T4_v3"]}
    assert ppg["zones"] == ["1"] and ppg["tags"][TAG_ATTEMPT] == "j-1-a1"
    puts = arm.vm_puts()[-3:]
    assert {x["properties"]["proximityPlacementGroup"]["id"] for x in puts} == {ppg["id"]}
    assert len(ppg["properties"]["virtualMachines"]) == 3
    # Every node: its own rank, node 0's private address as the rendezvous endpoint.
    nic0 = arm.res["networkinterfaces"][(rg.lower(), f"{base}-n0-nic".lower())]
    ip0 = nic0["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
    for k, put in enumerate(puts):
        script = _script(put)
        assert _env(script, "SPOTWISE_NODE_RANK") == str(k)
        assert _env(script, "SPOTWISE_RDZV_ENDPOINT") == f"{ip0}:29400"
        assert put["tags"][TAG_NODE] == str(k)
    # Seen running, each with its node; a retry with the token adopts, no new PUT.
    seen = p.describe([i.ref for i in insts])
    assert [i.state for i in seen] == [InstanceState.RUNNING] * 3
    assert [i.node for i in seen] == [0, 1, 2]
    before = len(arm.vm_puts())
    assert [i.id for i in p.launch(_gang())] == [i.id for i in insts]
    assert len(arm.vm_puts()) == before
    assert [i.id for i in p.find_by_token("j-1-a1", "eastus")] == [i.id for i in insts]


def test_a_node_refused_undoes_the_gang_and_says_how_many_fitted(
    make, arm: FakeArm, rg: str
) -> None:
    p = make()
    arm.refuse_after = (2, ArmError(409, "SkuNotAvailable", "no NC4as_T4_v3 left in zone 1"))
    with pytest.raises(CapacityUnavailable) as e:
        p.launch(_gang(n=4))
    assert "only 2 of 4 Standard_NC4as_T4_v3 in eastus-1 before the capacity error" in str(e.value)
    assert e.value.pool == t4_offering().pool
    seen = p.describe([i.ref for i in p.find_by_token("j-1-a1")] or [])
    assert all(i.state is InstanceState.ENDED for i in seen)
    base = vm_name("j-1-a1")
    assert all(arm.vm(rg, f"{base}-n{k}") is None for k in range(4))


def test_a_node_whose_allocation_fails_later_reads_as_a_capacity_failure(
    make, arm: FakeArm
) -> None:
    p = make()
    arm.capacity["Standard_NC4as_T4_v3"] = 1
    insts = p.launch(_gang(n=2))
    seen = p.describe([i.ref for i in insts])
    assert seen[0].state is InstanceState.RUNNING
    assert seen[1].end_reason is EndReason.LAUNCH_FAILED
    assert seen[1].failure is not None and seen[1].failure.kind is FailureKind.CAPACITY
    assert "OverconstrainedAllocationRequest" in seen[1].failure.message
    assert "the condition is too restrictive" in seen[1].failure.message


def test_one_node_replaced_alone_joins_the_group_with_its_rank(make, arm: FakeArm, rg: str) -> None:
    p = make()
    insts = p.launch(_gang(n=2))
    p.describe([i.ref for i in insts])
    arm.evict(rg, insts[0].id)
    repl = _gang(token="j-1-a1-r1-n0", n=2, count=1, gang_node=0,
                 env={"SPOTWISE_ATTEMPT": "1", "SPOTWISE_RDZV_ROUND": "1",
                      "SPOTWISE_NNODES": "2"})  # fmt: skip
    (new,) = p.launch(repl)
    assert new.node == 0 and new.id == vm_name("j-1-a1-r1-n0")
    put = arm.vm_puts()[-1]
    ppg = arm.res["proximityplacementgroups"][(rg.lower(), group_name("spotwise-j-1-a1"))]
    assert put["properties"]["proximityPlacementGroup"]["id"] == ppg["id"]
    script = _script(put)
    assert _env(script, "SPOTWISE_NODE_RANK") == "0"
    nic = arm.res["networkinterfaces"][(rg.lower(), f"{new.id}-nic".lower())]
    ip = nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
    assert _env(script, "SPOTWISE_RDZV_ENDPOINT") == f"{ip}:29400"
    (seen,) = p.describe([new.ref])
    assert seen.state is InstanceState.RUNNING and seen.node == 0


def test_the_group_is_listed_and_deleted_once_its_vms_are_gone(make, arm: FakeArm, rg: str) -> None:
    p = make()
    insts = p.launch(_gang(n=2))
    groups = [t for t in p.list_tagged(OWNER) if t.ref.kind is ResourceKind.PLACEMENT_GROUP]
    (g,) = groups
    assert g.ref.id == group_name("spotwise-j-1-a1") and g.tags[TAG_ATTEMPT] == "j-1-a1"
    held = arm.res["proximityplacementgroups"]
    p.terminate([g.ref])  # still holds the VMs: not an error, still there
    assert (rg.lower(), g.ref.id) in held
    p.terminate([i.ref for i in insts])
    arm.names("virtualmachines")  # the deletes finish
    p.terminate([g.ref])
    assert (rg.lower(), g.ref.id) not in held
    p.terminate([g.ref])  # gone: not an error


FIXTURE = json.loads(Path("providers/azure/fixtures/proximity_placement_groups.json").read_text())


def _shape(doc: object) -> object:
    """The keys of a JSON document, nested, without its values (a list: its first item's)."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else ["empty"]
    return type(doc).__name__


def test_the_group_is_answered_and_read_as_the_rest_specs_examples_show(
    make, arm: FakeArm, rg: str
) -> None:
    p = make()
    p.launch(_gang(n=2))
    ours = arm.res["proximityplacementgroups"][(rg.lower(), group_name("spotwise-j-1-a1"))]
    example = FIXTURE["get"]["body"]
    for held in ("virtualMachineScaleSets", "availabilitySets"):  # a gang holds VMs only
        assert ours["properties"][held] == []
        ours = {**ours, "properties": {**ours["properties"], held: [{"id": "x"}]}}
    assert _shape({k: ours[k] for k in example}) == _shape(example)
    # The list answer of the example, served as is (plus our tag), read by the adapter.
    row = {**FIXTURE["list_by_resource_group"]["body"]["value"][0], "tags": {TAG_OWNER: OWNER}}
    arm.res["proximityplacementgroups"][(rg.lower(), "myproximityplacementgroup")] = row
    listed = {t.ref.id for t in p.list_tagged(OWNER) if t.ref.kind is ResourceKind.PLACEMENT_GROUP}
    assert listed == {"myProximityPlacementGroup", group_name("spotwise-j-1-a1")}
    codes = {e["code"] for e in FIXTURE["errors"]}
    assert {"AllocationFailed", "OverconstrainedAllocationRequest"} <= codes
