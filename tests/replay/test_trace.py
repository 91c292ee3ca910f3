"""Trace loading: the 0/1 conventions, gap handling, and the shipped compact traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scheduler.replay.datasets import CBL_ON_DEMAND, CBL_SPOT, cbl_2022, v100_2023
from scheduler.replay.trace import (
    Convention,
    gap_hours_from_times,
    load_availability_csv,
    load_fail_csv,
    load_json_trace,
    region_of,
    single_zone,
    to_available,
    trace_from_json,
)

pytestmark = pytest.mark.timeout(30)


def test_conventions_are_opposite() -> None:
    raw = [1, 0, 0, 1, 4]
    assert to_available(raw, Convention.AVAILABLE).tolist() == [True, False, False, True, True]
    assert to_available(raw, Convention.PREEMPTED).tolist() == [False, True, True, False, False]


def test_json_loader_needs_the_convention(tmp_path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}))
    avail, gap, prices = load_json_trace(path, Convention.AVAILABLE)
    assert avail.tolist() == [True, False, True] and gap == 600 and prices is None
    avail, _, _ = load_json_trace(path, Convention.PREEMPTED)  # sky_spot full.json style
    assert avail.tolist() == [False, True, False]


def test_trace_from_json_preempted_with_prices(tmp_path) -> None:
    path = tmp_path / "full.json"
    doc = {"metadata": {"gap_seconds": 300}, "data": [1, 0, 0], "prices": [1.5, 1.25, 1.0]}
    path.write_text(json.dumps(doc))
    t = trace_from_json(path, Convention.PREEMPTED, "us-east-1c", 3.06, gap_seconds=195)
    assert t.available.tolist() == [[False, True, True]]
    assert t.spot_price.tolist() == [[1.5, 1.25, 1.0]]
    assert t.gap_hours * 3600 == pytest.approx(195)
    with pytest.raises(ValueError, match="spot_price"):
        path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1]}))
        trace_from_json(path, Convention.AVAILABLE, "z", 3.06)


def test_fail_csv_is_inverted(tmp_path) -> None:
    path = tmp_path / "z.txt"
    path.write_text(
        "0,2022-10-26T22:05:04.000Z,0\n1,2022-10-26T22:15:04.000Z,1\n2,2022-10-26T22:25:04.000Z,0\n"
    )
    avail, times = load_fail_csv(path)
    assert avail.tolist() == [True, False, True]
    assert gap_hours_from_times(times) == pytest.approx(600 / 3600)


def test_availability_csv_gap_from_timestamps(tmp_path) -> None:
    path = tmp_path / "z.csv"
    path.write_text("date,availability\n2023-02-15 22:08:16,0\n2023-02-15 22:11:31,1\n")
    avail, times = load_availability_csv(path)
    assert avail.tolist() == [False, True]
    assert gap_hours_from_times(times) * 3600 == pytest.approx(195)  # not the 300 s of a copy


def test_shipped_2022_traces() -> None:
    traces = cbl_2022()
    assert len(traces) == 8
    t = traces["us-west-2b_k80_1"]
    assert t.n_ticks == 3895 and t.gap_hours == pytest.approx(1 / 6)
    assert t.available.mean() == pytest.approx(0.117, abs=0.001)  # per the data README
    assert t.on_demand_price == CBL_ON_DEMAND and np.all(t.spot_price == CBL_SPOT)
    # starts with a 1 in the available-convention JSON (tick 0 of us-west-2a_v100_1 is 1)
    assert traces["us-west-2a_v100_1"].available[0, :3].tolist() == [True, False, False]


def test_shipped_2023_v100() -> None:
    t = v100_2023()
    assert t.available.shape == (9, 20158)
    assert t.gap_hours * 3600 == pytest.approx(195)
    frac = dict(zip(t.zones, t.available.mean(axis=1), strict=True))
    assert frac["us-east-1a"] == pytest.approx(0.167, abs=0.001)
    assert frac["us-west-2b"] == pytest.approx(0.905, abs=0.001)
    mean = dict(zip(t.zones, t.spot_price.mean(axis=1), strict=True))
    assert mean["us-east-1a"] == pytest.approx(1.654, abs=0.001)
    assert t.spot_price.max() == pytest.approx(1.8464, abs=1e-4)
    assert t.regions[0] == "us-east-1" and t.regions[-1] == "us-west-2"


def test_window_and_select() -> None:
    t = single_zone([1, 0, 1, 1], 1.0, [1.0, 2.0, 3.0, 4.0], 5.0)
    w = t.window(1, 2)
    assert w.available.tolist() == [[False, True]] and w.spot_price.tolist() == [[2.0, 3.0]]
    with pytest.raises(ValueError):
        t.window(3, 2)
    assert region_of("us-west-2a") == "us-west-2"
    assert region_of("us-central1-a") == "us-central1"
