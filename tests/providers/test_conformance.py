"""The provider conformance suite: every adapter answers the seam's questions the same way.

Parametrised over the in-memory fake (with late visibility), the local market (real
processes), AWS on moto, GCP and Azure on their loopback REST fakes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from providers.base import (
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FailureKind,
    Instance,
    InstanceState,
    LaunchRejected,
    LaunchRequest,
    Market,
    Provider,
    ProviderError,
    ResourceKind,
    ResourceRef,
    TaggedResource,
)
from providers.fake import FakeCloud
from tests.support.aws_fixtures import placement_groups  # noqa: F401 (a fixture)
from tests.support.aws_harness import aws_harness
from tests.support.azure_harness import azure_harness
from tests.support.conformance import OWNER, Harness, StepClock
from tests.support.fakes import offering
from tests.support.gcp_harness import gcp_harness


def _fake_harness(_: Path) -> Harness:
    clock = StepClock()
    cloud = FakeCloud([offering()], clock=clock, visibility_delay=timedelta(seconds=20))
    o = cloud.offerings()[0]

    def capacity() -> None:
        cloud.fail_later[o.pool] = FakeCloud.capacity_failure(o.pool)

    return Harness(
        cloud,
        o,
        inject_capacity=capacity,
        inject_gang_capacity=lambda _n: capacity(),  # all or nothing: no partial gangs here
        wait=clock.advance,
        unknown_ref=ResourceRef("fake-999999", o.region, o.zone),
        visible_within=30,
    )


def _local_harness(tmp_path: Path) -> Harness:
    from providers.local import LocalMarket, LocalSettings

    m = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1.0, kill_after="2s"))
    o = next(x for x in m.offerings() if x.market is Market.ON_DEMAND)
    h = Harness(
        m, o, unknown_ref=ResourceRef("local-0000000000000000"), visible_within=10,
        inject_gang_capacity=lambda n: m.set_capacity({o.pool: n}),
    )  # fmt: skip
    h.cleanup.append(lambda: m.terminate([t.ref for t in m.list_tagged(OWNER)]))
    return h


HARNESSES = {
    "fake": _fake_harness,
    "local": _local_harness,
    "aws": aws_harness,
    "gcp": gcp_harness,
    "azure": azure_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "aws":  # moto has no placement groups: answered beside it
        request.getfixturevalue("placement_groups")
    harness = HARNESSES[request.param](tmp_path)
    yield harness
    for fn in harness.cleanup:
        fn()


def _token() -> str:
    return "conf-" + uuid.uuid4().hex[:10]


def test_is_a_provider(h: Harness) -> None:
    assert isinstance(h.provider, Provider)
    caps = h.provider.capabilities
    assert caps.max_count >= 1 and caps.visibility_delay >= timedelta(0)
    assert isinstance(h.provider.drain_events(), list)


@pytest.mark.slow
def test_launch_is_idempotent_on_the_token(h: Harness) -> None:
    req = h.request(_token())
    first = h.provider.launch(req)
    again = h.provider.launch(req)
    assert len(first) == 1 and [i.id for i in again] == [i.id for i in first]
    assert first[0].state in (InstanceState.PENDING, InstanceState.RUNNING)
    found = h.provider.find_by_token(req.token, first[0].region)
    assert [i.id for i in found] == [first[0].id]
    (seen,) = h.visible([first[0].ref])
    assert seen.state is not InstanceState.NOT_FOUND
    assert h.provider.find_by_token(_token()) == []


@pytest.mark.slow
def test_describe_of_an_unknown_id_is_not_found(h: Harness) -> None:
    assert h.unknown_ref is not None
    (seen,) = h.provider.describe([h.unknown_ref])
    assert seen.id == h.unknown_ref.id and seen.state is InstanceState.NOT_FOUND


@pytest.mark.slow
def test_terminate_is_idempotent_and_ends_the_instance(h: Harness) -> None:
    (inst,) = h.provider.launch(h.request(_token()))
    h.visible([inst.ref])
    h.provider.terminate([inst.ref])
    (ended,) = h.ended([inst.ref])
    assert ended.state is InstanceState.ENDED
    assert ended.end_reason in (EndReason.TERMINATED, EndReason.UNKNOWN)
    h.provider.terminate([inst.ref])  # again: not an error
    assert h.unknown_ref is not None
    h.provider.terminate([h.unknown_ref])  # never seen: not an error either


@pytest.mark.slow
def test_tag_listing_returns_our_resources_only(h: Harness) -> None:
    (inst,) = h.provider.launch(h.request(_token()))
    h.visible([inst.ref])
    tagged = h.provider.list_tagged(OWNER)
    assert all(isinstance(t, TaggedResource) for t in tagged)
    mine = [t for t in tagged if t.ref.id == inst.id]
    assert len(mine) == 1 and mine[0].live and mine[0].tags[TAG_OWNER] == OWNER
    assert not [t for t in h.provider.list_tagged("someone-else") if t.ref.id == inst.id]


@pytest.mark.slow
def test_capacity_errors_are_typed_and_name_the_pool(h: Harness) -> None:
    if h.inject_capacity is None:
        pytest.skip("this harness cannot inject capacity errors")
    h.inject_capacity()
    try:
        launched = h.provider.launch(h.request(_token()))
    except CapacityUnavailable as e:
        assert e.pool == h.offering.pool
        return
    # The outcome may arrive later (GCE operations, Azure pollers): through describe.
    (seen,) = h.ended([i.ref for i in launched])
    assert seen.end_reason is EndReason.LAUNCH_FAILED and seen.failure is not None
    assert seen.failure.kind in (FailureKind.CAPACITY, FailureKind.QUOTA)
    assert seen.failure.pool == h.offering.pool


@pytest.mark.slow
def test_a_wrong_request_is_rejected_not_a_capacity_problem(h: Harness) -> None:
    req = h.request(_token(), env={"NOT A NAME": "x"})
    if isinstance(h.provider, FakeCloud):
        h.provider.fail_launch[h.offering.pool] = LaunchRejected("fake: bad request")
    with pytest.raises(ProviderError) as info:
        h.provider.launch(req)
    assert isinstance(info.value, LaunchRejected)
    assert not isinstance(info.value, CapacityUnavailable)


@pytest.mark.slow
def test_late_visibility_stays_within_the_stated_delay(h: Harness) -> None:
    (inst,) = h.provider.launch(h.request(_token()))
    delay = h.provider.capabilities.visibility_delay.total_seconds()
    (first,) = h.provider.describe([inst.ref])
    if first.state is InstanceState.NOT_FOUND:
        assert delay > 0, "an instance missing right after launch needs a visibility_delay"
    (later,) = h.visible([inst.ref])
    assert later.state is not InstanceState.NOT_FOUND


# Gangs: every provider launches N nodes of one attempt whole or not at all, each with its
# rank, and launches one node alone, with its rank, to replace a lost one.


def _gang(h: Harness, attempt: str, n: int = 2, **changes: object) -> LaunchRequest:
    """A gang of `n` for the attempt `attempt` (its token, unless `token` is changed)."""
    fields: dict[str, object] = {
        "token": attempt, "count": n, "placement_group": f"spotwise-{attempt}",
        "env": {"SPOTWISE_JOB_ID": "j-conf", "SPOTWISE_NNODES": str(n)},
    }  # fmt: skip
    fields.update(changes)
    token = str(fields.pop("token"))
    return h.request(token, **fields)


def _running(h: Harness, refs: list[ResourceRef]) -> list[Instance]:
    return h.until(refs, lambda i: i.state is InstanceState.RUNNING, 30)


@pytest.mark.slow
def test_a_gang_launches_whole_with_one_rank_per_node(h: Harness) -> None:
    assert h.provider.capabilities.max_count >= 2 and h.provider.capabilities.placement_groups
    req = _gang(h, _token())
    nodes = h.provider.launch(req)
    assert sorted(i.node for i in nodes) == [0, 1] and len({i.id for i in nodes}) == 2
    assert [i.id for i in h.provider.launch(req)] == [i.id for i in nodes]  # a retry adopts
    seen = _running(h, [i.ref for i in nodes])
    assert [i.state for i in seen] == [InstanceState.RUNNING] * 2
    assert sorted(i.node for i in seen) == [0, 1]
    found = h.provider.find_by_token(req.token, h.offering.region)
    assert sorted(i.id for i in found) == sorted(i.id for i in nodes)
    h.provider.terminate([i.ref for i in nodes])
    assert all(i.state is InstanceState.ENDED for i in h.ended([i.ref for i in nodes]))
    # What the gang's placement left (a group, a policy) is ours to collect, and goes.
    for _ in range(3):
        left = [t for t in h.provider.list_tagged(OWNER) if t.ref.kind is not ResourceKind.INSTANCE]
        h.provider.terminate([t.ref for t in left])
        h.wait(1.0)
    assert not [t for t in h.provider.list_tagged(OWNER) if t.live]


@pytest.mark.slow
def test_a_gang_short_of_capacity_leaves_no_node_running(h: Harness) -> None:
    assert h.inject_gang_capacity is not None
    h.inject_gang_capacity(1)  # room for one node of two
    req = _gang(h, _token())
    try:
        launched = h.provider.launch(req)
    except CapacityUnavailable as e:
        assert e.pool == h.offering.pool
        left = h.provider.find_by_token(req.token, h.offering.region)
        seen = h.ended([i.ref for i in left]) if left else []
        assert all(i.state is InstanceState.ENDED for i in seen)
        return
    # The outcome arrives later (a bulk operation, an allocation): some node failed for
    # capacity in the pool, and the scheduler ends the others (all or nothing).
    seen = h.until(
        [i.ref for i in launched],
        lambda i: i.state in (InstanceState.RUNNING, InstanceState.ENDED),
        30,
    )
    failed = [i for i in seen if i.end_reason is EndReason.LAUNCH_FAILED]
    assert failed and all(i.failure is not None for i in failed)
    assert {i.failure.kind for i in failed if i.failure} <= {FailureKind.CAPACITY}
    assert {i.failure.pool for i in failed if i.failure} == {h.offering.pool}


@pytest.mark.slow
def test_one_node_of_a_gang_is_replaced_alone_with_its_rank(h: Harness) -> None:
    token = _token()
    nodes = sorted(h.provider.launch(_gang(h, token)), key=lambda i: i.node)
    _running(h, [i.ref for i in nodes])
    h.provider.terminate([nodes[1].ref])
    h.ended([nodes[1].ref])
    replacement = _gang(h, token, count=1, gang_node=1, token=f"{token}-r1-n1")
    (new,) = h.provider.launch(replacement)
    assert new.node == 1 and new.id not in {i.id for i in nodes}
    (seen,) = _running(h, [new.ref])
    assert seen.state is InstanceState.RUNNING and seen.node == 1
    (kept,) = h.provider.describe([nodes[0].ref])
    assert kept.state is InstanceState.RUNNING and kept.node == 0
    h.provider.terminate([nodes[0].ref, new.ref])
