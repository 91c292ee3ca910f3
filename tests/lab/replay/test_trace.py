"""Trace loading: the 0/1 conventions, gap handling, and the shipped compact traces."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from scheduler.lab.replay.bench_settings import sweep
from scheduler.lab.replay.data import derive
from scheduler.lab.replay.datasets import (
    CBL_ON_DEMAND,
    CBL_SPOT,
    cbl_2022,
    cbl_2022_later,
    v100_2023,
)
from scheduler.lab.replay.split import Split, describe, periods
from scheduler.lab.replay.trace import (
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


def test_shipped_later_2022_traces_are_the_eight_series_over_37_8_days() -> None:
    traces = cbl_2022_later()
    assert sorted(traces) == sorted(f"2022-12 {n}" for n in cbl_2022())
    t = traces["2022-12 us-west-2b_k80_1"]
    assert t.n_ticks == 5446 and t.gap_hours == pytest.approx(1 / 6)  # 37.8 days
    assert t.zones == ("us-west-2b",) and t.name == "2022-12 us-west-2b_k80_1"
    # never up in the first probe period (2140 rounds), up 23.8% of the second (3304)
    assert not t.available[0, :2142].any()
    assert t.available[0, 2142:].mean() == pytest.approx(0.238, abs=0.001)
    assert t.on_demand_price == CBL_ON_DEMAND and np.all(t.spot_price == CBL_SPOT)
    with np.load(Path(derive.__file__).parent / "cbl_2022_usw2_later.npz") as doc:
        assert doc["filled"].tolist() == [2140, 2141]
        assert str(doc["start"]) == "2022-11-28T22:23:37Z"
    v = traces["2022-12 us-west-2a_v100_1"].available[0]
    assert v[2140] == v[2141] == v[2139]  # the filled rounds repeat the one before


def test_later_2022_series_are_held_out_only() -> None:
    labels = {split: [p.label for p in periods(split)] for split in Split}
    later = [label for label in labels[Split.TEST] if label.startswith("2022-12 ")]
    assert len(later) == 8
    assert not any(label.startswith("2022-12 ") for label in labels[Split.TRAIN])
    assert "2022-11-28..2023-01-05" in describe(Split.TEST)
    assert "2022-11" not in describe(Split.TRAIN)
    # and the held-out sweep replays them at every task length (the quick sweep does not)
    (cell,) = [s for s in sweep(Split.TEST, windows=1) if s.key == "sweep o=1 slack=2"]
    swept = {c.label for c in cell.cases if c.label.startswith("2022-12 ")}
    assert len(swept) == 24 and all(c.trace.n_ticks == 5446 for c in cell.cases if c.label in swept)


def _probe_csv(path: Path, start: str, fails: list[int], step: int = 600) -> None:
    """A raw probe CSV as the 2022 collection wrote it: round, UTC time, fail."""
    t0 = datetime.fromisoformat(start)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            f"{i},{(t0 + timedelta(seconds=step * i)).isoformat().replace('+00:00', '.000Z')},{f}\n"
            for i, f in enumerate(fails)
        )
    )


Probes = Callable[..., None]


@pytest.fixture
def later_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Probes:
    """Writes one series' two later probe periods under tmp_path, and points derive at them
    (output to tmp_path / "out")."""
    monkeypatch.setattr(derive, "CBL_NAMES", ["us-west-2a_v100_1"])
    monkeypatch.setattr(derive, "HERE", tmp_path / "out")
    (tmp_path / "out").mkdir()
    base = tmp_path / "michaelvll-skypilot-spot-strategy/aws-availability-2022"

    def write(first: tuple[str, list[int]], second: tuple[str, list[int]], step: int = 600):
        for folder, (start, fails) in zip(derive.LATER_2022_FOLDERS, (first, second), strict=True):
            _probe_csv(base / folder / "us-west-2a_v100_1.txt", start, fails, step)

    return write


def test_derive_joins_the_later_periods_and_fills_the_rounds_missing_between(
    tmp_path: Path, later_probes: Probes
) -> None:
    """The second period starts 26.6 min after the first's last round: two rounds missing,
    filled with the state before them and recorded."""
    later_probes(("2022-12-13T18:37:10+00:00", [1, 0, 0]), ("2022-12-13T19:23:44+00:00", [1, 0]))
    derive.derive_cbl_later(tmp_path)
    with np.load(tmp_path / "out/cbl_2022_usw2_later.npz") as doc:
        n = int(doc["n_ticks"])
        avail = np.unpackbits(doc["available"], axis=1, count=n)[0].tolist()
        assert doc["filled"].tolist() == [3, 4]
    assert avail == [0, 1, 1, 1, 1, 0, 1]  # fail 1 = not available; rounds 3-4 copy round 2


def test_derive_refuses_a_seam_it_would_have_to_invent_hours_for(
    tmp_path: Path, later_probes: Probes
) -> None:
    later_probes(("2022-11-28T22:23:37+00:00", [0, 0]), ("2022-11-29T22:23:37+00:00", [0, 0]))
    with pytest.raises(SystemExit, match="142 probe rounds missing"):
        derive.derive_cbl_later(tmp_path)


def test_derive_refuses_probe_rounds_that_are_not_600_s_apart(
    tmp_path: Path, later_probes: Probes
) -> None:
    first, second = ("2022-11-28T22:23:37+00:00", [0, 0]), ("2022-12-13T19:23:44+00:00", [0, 0])
    later_probes(first, second, step=900)
    with pytest.raises(SystemExit, match="900"):
        derive.derive_cbl_later(tmp_path)


def test_derive_from_a_wrong_folder_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        derive.main([str(tmp_path)])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(f"no such file (is {tmp_path} the shared traces folder?)")


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
