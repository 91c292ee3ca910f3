"""Local market without processes: settings, catalog, trace replay, prices, capacity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from providers.base import (
    CapacityUnavailable,
    LaunchRejected,
    LaunchRequest,
    Market,
    Offering,
    Provider,
)
from providers.local import LocalMarket, LocalSettings
from providers.local.market import suggest_trace_start
from providers.local.trace import load_trace

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POOL = "aws/us-east-1c/p3.2xlarge/spot"


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.t = start

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


def market(tmp_path: Path, clock: FakeClock, **kw: object) -> LocalMarket:
    return LocalMarket(LocalSettings(state_dir=tmp_path, **kw), clock=clock)


def test_settings_defaults_and_parsing(tmp_path: Path) -> None:
    s = LocalSettings()
    assert s.speedup == 60 and s.trace == "aws-v100-2023-02-15"
    assert s.grace_period == timedelta(seconds=10) and s.kill_after == timedelta(seconds=10)
    assert s.trace_start == timedelta(0)
    assert str(s.resolved_state_dir()).endswith("spotwise/local")
    s = LocalSettings(trace_start="2023-03-01T00:00:00", grace_period="250ms")
    assert s.trace_start == datetime(2023, 3, 1, tzinfo=UTC)
    assert s.grace_period == timedelta(seconds=0.25)
    assert LocalSettings(trace_start="6h").trace_start == timedelta(hours=6)
    with pytest.raises(ValidationError, match="shipped traces"):
        LocalSettings(trace="nope")
    with pytest.raises(ValidationError):
        LocalSettings(speedup=0)
    with pytest.raises(ValidationError):
        LocalSettings(spedup=2)  # typo is an error, not a silent default


def test_is_a_provider_with_realistic_offerings(tmp_path: Path) -> None:
    m = market(tmp_path, FakeClock())
    assert isinstance(m, Provider) and m.name == "local"
    offs = m.offerings()
    on_demand = [o for o in offs if o.market == Market.ON_DEMAND]
    spot = [o for o in offs if o.market == Market.SPOT]
    assert len(on_demand) >= 40 and 0 < len(spot) < len(on_demand)
    assert {o.cloud for o in on_demand} == {"aws", "gcp", "azure"}
    assert {"V100", "A100", "H100", "T4", "L4"} <= {o.gpu_model for o in on_demand}
    assert {1, 4, 8} <= {o.gpu_count for o in on_demand}
    assert len({o.pool for o in offs}) == len(offs)
    for o in offs:
        assert isinstance(o, Offering) and o.price_per_hour > 0 and o.seen_at == T0
    p3 = next(o for o in on_demand if o.instance_type == "p3.2xlarge")
    assert (p3.gpu_count, p3.gpu_memory_gb, p3.price_per_hour) == (1, 16, 3.06)


def test_subset_by_cloud_and_region(tmp_path: Path) -> None:
    m = market(tmp_path, FakeClock(), clouds=["gcp"], regions=["us-central1"])
    offs = m.offerings()
    assert offs and {(o.cloud, o.region) for o in offs} == {("gcp", "us-central1")}


def test_spot_availability_and_price_follow_the_trace(tmp_path: Path) -> None:
    trace = load_trace("aws-v100-2023-02-15")
    clock = FakeClock()
    m = market(tmp_path, clock, speedup=195.0)  # one trace tick per real second
    seen_prices, seen_missing = set(), 0
    for tick in range(0, 3000, 7):
        clock.t = T0 + timedelta(seconds=tick)
        assert m.market_time() == trace.start + timedelta(seconds=195 * tick)
        spot = {o.pool: o for o in m.offerings() if o.market == Market.SPOT}
        avail = trace.available["us-east-1c"][tick] == "1"
        assert (POOL in spot) == avail == m.is_available(POOL)
        if avail:
            recorded = trace.prices["us-east-1c"][tick]
            assert spot[POOL].price_per_hour == pytest.approx(recorded, rel=1e-3)
            seen_prices.add(spot[POOL].price_per_hour)
        else:
            seen_missing += 1
        assert "aws/us-east-1c/p3.2xlarge/on-demand" not in spot
    assert len(seen_prices) > 3 and seen_missing > 10  # prices move and capacity comes and goes


def test_launch_into_unavailable_pool_raises_capacity_unavailable(tmp_path: Path) -> None:
    trace = load_trace("aws-v100-2023-02-15")
    tick = trace.available["us-east-1c"].index("0")
    clock = FakeClock(T0 + timedelta(seconds=tick))
    m = market(tmp_path, clock, speedup=195.0)
    od = next(o for o in m.offerings() if o.pool == "aws/us-east-1c/p3.2xlarge/on-demand")
    spot = Offering(**{**{f: getattr(od, f) for f in od.__slots__}, "market": Market.SPOT})
    req = LaunchRequest(token="t", offering=spot, command=["true"], env={}, tags={})
    with pytest.raises(CapacityUnavailable) as e:
        m.launch(req)
    assert e.value.pool == POOL
    assert m.find_by_token("t") == []


def test_epoch_persists_across_restarts(tmp_path: Path) -> None:
    clock = FakeClock()
    a = market(tmp_path, clock, speedup=100.0, trace_start="1h")
    clock.advance(30)
    b = market(tmp_path, clock, speedup=100.0, trace_start="1h")
    assert a.market_time() == b.market_time()
    assert b.market_time() - load_trace("aws-v100-2023-02-15").start == timedelta(seconds=6600)


def test_next_unavailability_and_suggested_start(tmp_path: Path) -> None:
    lead = timedelta(seconds=195 * 3)
    start = suggest_trace_start(POOL, lead)
    clock = FakeClock()
    m = market(tmp_path, clock, speedup=195.0, trace_start=start)
    assert m.is_available(POOL)
    when = m.next_unavailability(POOL)
    assert when is not None and when - T0 == timedelta(seconds=3)  # 3 ticks at 1 tick/s
    clock.t = when - timedelta(milliseconds=1)
    assert m.is_available(POOL)
    clock.t = when
    assert not m.is_available(POOL)
    assert m.next_unavailability("aws/us-east-1c/p3.2xlarge/on-demand") is None
    later = m.next_unavailability(POOL, after=when)
    assert later is not None and later > when


def test_trace_start_as_time_must_lie_inside_the_trace() -> None:
    with pytest.raises(ValidationError, match="outside trace"):
        LocalSettings(trace_start="2024-01-01T00:00:00Z")
    s = LocalSettings(trace_start="2023-02-16T00:00:00Z")
    assert isinstance(s.trace_start, datetime)


@pytest.mark.parametrize(
    ("command", "env"),
    [
        ([], {}),
        ("sleep 30", {}),  # a string, not an argv
        (["sleep", "1\0"], {}),
        (["true"], {"A=B": "x"}),  # crashed the supervisor once, relaunched until it gave up
        (["true"], {"NOT A NAME": "x"}),
        (["true"], {"1X": "x"}),
        (["true"], {"X": "a\0b"}),
        (["true"], {"X": "\ud800"}),  # not encodable for exec
        (["x" * (128 * 1024)], {}),
    ],
)
def test_a_malformed_request_is_rejected_before_anything_starts(
    tmp_path: Path, command: object, env: dict[str, str]
) -> None:
    m = market(tmp_path, FakeClock())
    od = next(o for o in m.offerings() if o.market is Market.ON_DEMAND)
    req = LaunchRequest(token="bad", offering=od, command=command, env=env, tags={})  # type: ignore[arg-type]
    with pytest.raises(LaunchRejected) as e:
        m.launch(req)
    assert "\0" not in str(e.value) and "a\0b" not in str(e.value)
    assert m.find_by_token("bad") == [] and not list((tmp_path / "instances").iterdir())


@pytest.mark.parametrize("count", [0, 9])
def test_gang_size_is_bounded_by_the_capabilities(tmp_path: Path, count: int) -> None:
    m = market(tmp_path, FakeClock())
    assert m.capabilities.max_count == 8 and m.capabilities.idempotency_window is None
    od = next(o for o in m.offerings() if o.market is Market.ON_DEMAND)
    req = LaunchRequest(token="g", offering=od, command=["true"], env={}, tags={}, count=count)
    with pytest.raises(LaunchRejected):
        m.launch(req)


def test_labels_are_stored_as_given(tmp_path: Path) -> None:
    caps = market(tmp_path, FakeClock()).capabilities
    assert caps.label("Job: ü/x y\n") == "Job: ü/x y\n" and caps.visibility_delay == timedelta(0)
