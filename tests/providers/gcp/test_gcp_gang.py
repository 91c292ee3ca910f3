"""Gangs on GCE through the real google-cloud-compute client against the loopback fake: one
bulkInsert with count = minCount = N, a compact placement policy where the series takes one,
labels per node, all or nothing with the zone's partial capacity read from the operation,
a node replaced alone in the same policy, and the policy collected as a leak."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_OWNER,
    EndReason,
    FailureKind,
    InstanceState,
    LaunchRequest,
    Market,
    Offering,
    ResourceKind,
)
from providers.gcp import GcpProvider
from providers.gcp.fake import PROJECT, FakeGcp
from providers.gcp.gangs import node_of_name, policy_name
from providers.gcp.instances import instance_name, request_id
from tests.support.gcp_harness import REGION, ZONE, t4_offering

pytestmark = pytest.mark.timeout(60)
L4 = Offering("gcp", REGION, ZONE, "g2-standard-4", "L4", 1, 24.0, 4, 16.0, Market.SPOT, 0.3,
              datetime.now(UTC))  # fmt: skip


def _gang(token: str = "j-1-a1", n: int = 3, offering: Offering = L4, **kw) -> LaunchRequest:
    fields = {
        "token": token,
        "offering": offering,
        "command": ["python", "-m", "trainer", "--nnodes", str(n)],
        "env": {"SPOTWISE_JOB_ID": "j-1", "SPOTWISE_ATTEMPT": "1", "SPOTWISE_NNODES": str(n),
                "SPOTWISE_RDZV_ID": "j-1-a1"},
        "tags": {TAG_JOB: "j-1", TAG_ATTEMPT: "j-1-a1", TAG_OWNER: "tests"},
        "count": n,
        "placement_group": "spotwise-j-1-a1",
    }  # fmt: skip
    fields.update(kw)
    return LaunchRequest(**fields)  # type: ignore[arg-type]


def _bulk(fake: FakeGcp) -> list[tuple[dict, dict]]:
    return [(q, b) for _, _, q, b in fake.requests("POST", r"/instances/bulkInsert$")]


def test_a_gang_is_one_bulk_insert_all_or_nothing_in_a_compact_policy(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    insts = provider.launch(_gang())
    assert [i.node for i in insts] == [0, 1, 2]
    assert all(i.state is InstanceState.PENDING for i in insts)
    base = instance_name("j-1-a1")
    assert [i.id for i in insts] == [f"{base}-n{k}" for k in range(3)]
    ((q, body),) = _bulk(fake)
    assert q["requestId"] == [request_id("j-1-a1", "bulkInsert")]
    assert int(body["count"]) == int(body["minCount"]) == 3  # int64: strings on the wire
    assert sorted(body["perInstanceProperties"]) == [i.id for i in insts]
    props = body["instanceProperties"]
    assert props["machineType"] == "g2-standard-4"  # properties take short names
    assert props["scheduling"]["provisioningModel"] == "SPOT"
    assert props["disks"][0]["initializeParams"]["diskType"] == "pd-balanced"
    pname = policy_name("spotwise-j-1-a1")
    assert props["resourcePolicies"] == [pname]
    policy = fake.policies[(REGION, pname)]
    assert policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
    assert "spotwise-owner=tests" in policy["description"]
    assert "spotwise-attempt=j-1-a1" in policy["description"]
    # One startup-script for all: the rank from the VM's own name, node 0's name hosts.
    items = {i["key"]: i["value"] for i in props["metadata"]["items"]}
    script = items["startup-script"]
    assert "computeMetadata/v1/instance/name" in script and "${name##*-n}" in script
    assert f"export SPOTWISE_RDZV_ENDPOINT={base}-n0:29400" in script
    assert "SPOTWISE_NODE_RANK=" not in script.split("computeMetadata")[0]
    # The operation finishes; every node runs and is labelled with its node (setLabels).
    seen = provider.describe([i.ref for i in insts])
    seen = provider.describe([i.ref for i in insts])
    assert [i.state for i in seen] == [InstanceState.RUNNING] * 3
    assert [fake.instances[(ZONE, i.id)]["labels"][TAG_NODE] for i in insts] == ["0", "1", "2"]
    # Idempotent: the same token adopts the gang, no second bulkInsert.
    again = provider.launch(_gang())
    assert [i.id for i in again] == [i.id for i in insts] and len(_bulk(fake)) == 1
    assert [i.id for i in provider.find_by_token("j-1-a1", REGION)] == [i.id for i in insts]


def test_a_zone_short_of_capacity_fails_the_whole_gang_and_says_how_many_it_held(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    fake.capacity[ZONE] = 2
    insts = provider.launch(_gang(n=4))
    seen = provider.describe([i.ref for i in insts])
    assert all(i.state is InstanceState.ENDED for i in seen)
    assert all(i.end_reason is EndReason.LAUNCH_FAILED for i in seen)
    f = seen[0].failure
    assert f is not None and f.kind is FailureKind.CAPACITY and f.pool == L4.pool
    assert f.held == 2 and "only 2 of 4 before the capacity error" in f.message
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in f.message
    assert not [n for (_, n) in fake.instances]  # nothing left: GCE rolled the two back
    assert fake.capacity[ZONE] == 2


def test_a_gang_on_n1_needs_no_policy(provider: GcpProvider, fake: FakeGcp) -> None:
    provider.launch(_gang(offering=t4_offering()))
    ((_, body),) = _bulk(fake)
    assert "resourcePolicies" not in body["instanceProperties"]
    assert not fake.policies
    assert body["instanceProperties"]["guestAccelerators"][0]["acceleratorType"] == (
        "nvidia-tesla-t4"
    )


def test_one_node_replaced_alone_joins_the_policy_with_its_rank(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    insts = provider.launch(_gang(n=2))
    provider.describe([i.ref for i in insts])
    fake.preempt(insts[0].id)
    repl = _gang(token="j-1-a1-r1-n0", n=2, count=1, gang_node=0,
                 env={"SPOTWISE_ATTEMPT": "1", "SPOTWISE_RDZV_ROUND": "1",
                      "SPOTWISE_NNODES": "2"})  # fmt: skip
    (new,) = provider.launch(repl)
    assert new.node == 0 and new.tags[TAG_NODE] == "0"
    ((_, _, _, body),) = fake.requests("POST", r"/zones/us-central1-a/instances$")
    assert body["resourcePolicies"] == [
        f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/{policy_name('spotwise-j-1-a1')}"
    ]
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert "export SPOTWISE_NODE_RANK=0" in items["startup-script"]
    assert f"export SPOTWISE_RDZV_ENDPOINT={new.id}:29400" in items["startup-script"]
    (seen,) = provider.describe([new.ref])
    (seen,) = provider.describe([new.ref])
    assert seen.state is InstanceState.RUNNING and seen.node == 0


def test_the_policy_is_listed_for_leak_collection_and_deleted_once_unused(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    insts = provider.launch(_gang(n=2))
    provider.describe([i.ref for i in insts])
    pols = [t for t in provider.list_tagged("tests") if t.ref.kind is ResourceKind.PLACEMENT_GROUP]
    (pol,) = pols
    assert pol.ref.id == policy_name("spotwise-j-1-a1") and pol.ref.region == REGION
    assert pol.tags[TAG_ATTEMPT] == "j-1-a1" and pol.tags[TAG_JOB] == "j-1"
    assert not [t for t in provider.list_tagged("someone-else") if t.ref.id == pol.ref.id]
    provider.terminate([pol.ref])  # still used by the VMs: not an error, still there
    assert (REGION, pol.ref.id) in fake.policies
    provider.terminate([i.ref for i in insts])
    provider.terminate([pol.ref])
    assert (REGION, pol.ref.id) not in fake.policies
    provider.terminate([pol.ref])  # gone: not an error


def test_node_ranks_come_from_names_before_the_labels_are_set() -> None:
    assert node_of_name(instance_name("t") + "-n12") == 12
    assert node_of_name(instance_name("t")) is None
    assert len(instance_name("x" * 200) + "-n63") <= 63
