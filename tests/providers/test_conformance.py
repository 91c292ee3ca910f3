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
    TAG_INSTALL,
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FailureKind,
    InstanceState,
    LaunchRejected,
    Market,
    Provider,
    ProviderError,
    ResourceRef,
    TaggedResource,
)
from providers.fake import FakeCloud
from tests.support.aws_harness import aws_harness
from tests.support.azure_harness import azure_harness
from tests.support.conformance import INSTALL, OWNER, Harness, StepClock
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
        wait=clock.advance,
        unknown_ref=ResourceRef("fake-999999", o.region, o.zone),
        visible_within=30,
    )


def _local_harness(tmp_path: Path) -> Harness:
    from providers.local import LocalMarket, LocalSettings

    m = LocalMarket(LocalSettings(state_dir=tmp_path / "market", speedup=1.0, kill_after="2s"))
    o = next(x for x in m.offerings() if x.market is Market.ON_DEMAND)
    h = Harness(m, o, unknown_ref=ResourceRef("local-0000000000000000"), visible_within=10)
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
    # The install id comes back on every provider: leak collection proves ownership by it.
    assert mine[0].tags[TAG_INSTALL] == INSTALL
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
