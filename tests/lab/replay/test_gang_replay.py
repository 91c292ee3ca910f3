"""Gangs in the replay: N x the price, about N x the interruptions, and the deadline bench
has a gang setting that every policy runs."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.lab.replay import bench_settings, scenarios
from scheduler.lab.replay.split import ZONES_2023, Split
from scheduler.lab.replay.trace import gang_trace

pytestmark = pytest.mark.timeout(300)


def _losses(avail: np.ndarray) -> int:
    return int(np.count_nonzero(avail[:, :-1] & ~avail[:, 1:]))


def test_a_gang_pays_n_times_and_is_interrupted_about_n_times_as_often():
    base = bench_settings.v100_2023().select(("us-west-2a", "us-east-1a", "us-east-1f"))
    g4 = gang_trace(base, 4, seed=1)
    assert g4.on_demand_price == pytest.approx(4 * base.on_demand_price)
    assert np.allclose(g4.spot_price, 4 * base.spot_price)
    one, four = _losses(base.available.astype(bool)), _losses(g4.available.astype(bool))
    assert 2.5 * one < four < 5 * one  # ~N x: the pool's losses plus 3 nodes' own
    assert gang_trace(base, 1) is base


@pytest.mark.slow
def test_the_deadline_bench_has_a_gang_setting():
    setting = bench_settings.gang(quick=True)
    assert any(s.key == "gang" for s in bench_settings.settings(quick=True))
    result = scenarios.run_setting(setting)
    assert result.runs > 0 and "spotwise" in result.stats
    # A 4-node gang on all on-demand costs 4 x a node's.
    assert result.od_cost == pytest.approx(4 * (48.0 + 0.2) * 3.06, rel=0.01)


@pytest.mark.parametrize("split", list(Split))
def test_the_split_settings_windows_lie_in_their_split_s_half_and_zones(split):
    """Gangs and price spikes are tuned on TRAIN and reported on TEST: every window lies in
    the split's half of 2023 and every pool is one of its zones (the gang setting's windows
    used to span both halves while its label said the second)."""
    full = bench_settings.v100_2023()
    half = full.n_ticks // 2
    lo, hi = (0, half) if split is Split.TRAIN else (half, full.n_ticks)
    for setting in bench_settings.split_settings(split):
        assert setting.windows.startswith(split.value)
        for case in setting.cases:
            assert set(case.trace.zones) <= set(ZONES_2023[split])
            length = int(np.ceil(case.job.deadline / full.gap_hours))
            assert case.starts and all(lo <= s and s + length <= hi for s in case.starts)


def test_bench_split_train_without_sweep_runs_only_the_split_settings(monkeypatch):
    from typer.testing import CliRunner

    from scheduler.cli import bench

    seen: list = []
    monkeypatch.setattr(
        bench, "_run_settings", lambda chosen, quick, jobs: seen.extend(chosen) or []
    )
    monkeypatch.setattr(bench, "deadline_doc", lambda *a: {"settings": []})
    result = CliRunner().invoke(bench.bench_app, ["deadline", "--split", "train", "--quick"])
    assert result.exit_code == 0, result.output
    assert [s.key for s in seen] == ["price-spike", "gang"]
    assert all(s.windows.startswith("train") for s in seen)
