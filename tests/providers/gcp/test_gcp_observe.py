"""Observe: preemption from the control plane told apart from the job's exit and from our
own termination; NOT_FOUND for unknown names; listing by labels; finding by token."""

from __future__ import annotations

import pytest

from providers.base import TAG_OWNER, EndReason, InstanceState, ResourceRef
from providers.gcp import GcpProvider
from providers.gcp.fake import FakeGcp
from tests.providers.gcp.test_gcp_launch import _req
from tests.support.gcp_harness import REGION, ZONE

pytestmark = pytest.mark.timeout(60)


def _running(provider: GcpProvider, token: str):
    (inst,) = provider.launch(_req(token))
    for _ in range(3):
        (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.RUNNING
    return inst


def test_preemption_is_interrupted(provider: GcpProvider, fake: FakeGcp) -> None:
    inst = _running(provider, "p-1")
    fake.preempt(inst.id)  # instance_termination_action=DELETE: the VM is gone
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.INTERRUPTED
    assert seen.ended_at is not None and seen.instance_type == inst.instance_type
    # Launching the token again (a lost reply, a restart) shows the same and inserts nothing,
    # even once GCE has forgotten the requestId: the insert operation is on record.
    fake.request_ids.clear()
    (again,) = provider.launch(_req("p-1"))
    assert again.end_reason is EndReason.INTERRUPTED
    assert len(fake.requests("POST", r"/instances$")) == 1
    # Our cleanup delete afterwards does not turn it into "terminated".
    provider.terminate([inst.ref])
    (seen,) = provider.describe([inst.ref])
    assert seen.end_reason is EndReason.INTERRUPTED


def test_preemption_with_stop_action_is_interrupted(provider: GcpProvider, fake: FakeGcp) -> None:
    inst = _running(provider, "p-2")
    fake.preempt(inst.id, action="STOP")
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.INTERRUPTED


def test_the_jobs_own_exit_is_exited(provider: GcpProvider, fake: FakeGcp) -> None:
    inst = _running(provider, "x-1")
    fake.guest_shutdown(inst.id)
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.EXITED
    # Still there (its disk is billed): listed as live so leak collection deletes it, and
    # that delete does not rewrite why it ended.
    (mine,) = [t for t in provider.list_tagged("tests") if t.ref.id == inst.id]
    assert mine.live
    (again,) = provider.launch(_req("x-1"))  # adopted, not relaunched
    assert again.id == inst.id and again.end_reason is EndReason.EXITED
    provider.terminate([inst.ref])
    (seen,) = provider.describe([inst.ref])
    assert seen.end_reason is EndReason.EXITED
    # Stopped without any operation on record (they expire): still the guest's doing.
    other = _running(provider, "x-2")
    fake.guest_shutdown(other.id)
    fake.ops.clear()
    (seen,) = provider.describe([other.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.EXITED


def test_our_termination_is_terminated(provider: GcpProvider, fake: FakeGcp) -> None:
    inst = _running(provider, "t-1")
    provider.terminate([inst.ref])
    provider.terminate([inst.ref])  # again: not an error
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.TERMINATED
    ((_, _, q, _),) = fake.requests("DELETE", inst.id)[:1]
    assert q["requestId"]


def test_unknown_names_are_not_found(provider: GcpProvider) -> None:
    refs = [ResourceRef("sw-nope-000000000000", REGION, ZONE), ResourceRef("sw-nope-2")]
    seen = provider.describe(refs)
    assert [s.state for s in seen] == [InstanceState.NOT_FOUND] * 2
    assert [s.id for s in seen] == ["sw-nope-000000000000", "sw-nope-2"]
    provider.terminate(refs)  # never seen: not an error


def test_list_tagged_and_find_by_token(provider: GcpProvider, fake: FakeGcp) -> None:
    inst = _running(provider, "l-1")
    fake.add_instance("us-central1-b", "stray", {TAG_OWNER: "tests", "spotwise-attempt": "x"})
    fake.add_instance("us-central1-b", "theirs", {TAG_OWNER: "someone-else"})
    fake.add_instance("europe-west4-a", "elsewhere", {TAG_OWNER: "tests"})  # not configured
    tagged = {t.ref.id: t for t in provider.list_tagged("tests")}
    assert set(tagged) == {inst.id, "stray"}
    assert tagged[inst.id].live and tagged[inst.id].ref.zone == ZONE
    assert tagged["stray"].tags["spotwise-attempt"] == "x"
    assert fake.requests("GET", r"aggregated/instances")[0][2]["filter"] == [
        'labels.spotwise-owner = "tests"'
    ]
    (found,) = provider.find_by_token("l-1")
    assert found.id == inst.id and found.zone == ZONE
    assert provider.find_by_token("l-1", "europe-west4") == []
    assert provider.find_by_token("never") == []
    # A ref without a zone is found by name across the configured regions.
    (seen,) = provider.describe([ResourceRef(inst.id)])
    assert seen.state is InstanceState.RUNNING and seen.zone == ZONE
