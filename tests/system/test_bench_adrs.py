"""The ADRS cant_be_late_multi setting: its windows, scenarios and score anchors."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.lab.replay.bench_settings import ADRS_SCENARIOS, adrs_multi, adrs_window_starts
from scheduler.lab.replay.scenarios import Case, CaseResult, Setting, collect


def test_window_starts_follow_the_seeded_sampler() -> None:
    # create_aligned_traces.py: np.random.seed(0), then randint(0, 20158 - 1107) per window.
    np.random.seed(0)
    expected = tuple(int(np.random.randint(0, 20158 - 1107)) for _ in range(8))
    assert adrs_window_starts(20158, 195, 8) == expected
    assert expected[:3] == (2732, 10799, 9845)


@pytest.mark.timeout(30)
def test_setting_matches_the_evaluator() -> None:
    s = adrs_multi()
    assert [c.label for c in s.cases] == [name for name, _, _ in ADRS_SCENARIOS]
    assert [len(c.starts) for c in s.cases] == [8, 8, 6, 6, 4, 2]
    assert [len(c.trace.zones) for c in s.cases] == [2, 2, 3, 3, 5, 9]
    for c in s.cases:
        assert (c.job.work, c.job.deadline, c.job.restart_overhead) == (48.0, 52.0, 0.2)
        assert c.job.migration_cost == 0.0
        assert np.all(c.trace.spot_price == 0.9731) and c.trace.on_demand_price == 3.06
        assert max(c.starts) + 960 <= c.trace.n_ticks  # 52 h of 195 s ticks fits
    assert s.anchors == pytest.approx((146.88, 46.7088))


def test_mean_of_cases_weights_each_case_equally() -> None:
    dummy = adrs_multi(quick=True).cases[0]
    case = Case("x", dummy.trace, (0,), dummy.job)
    setting = Setting("k", "t", (case, case), anchors=(100.0, 0.0), mean_of_cases=True)
    a = CaseResult({"p": [10.0, 10.0, 10.0]}, {"p": 0}, [0.0] * 3, [0.0] * 3)
    b = CaseResult({"p": [40.0]}, {"p": 1}, [0.0], [0.0])
    res = collect(setting, [a, b])
    assert res.stats["p"].mean == pytest.approx(25.0)  # not (30 + 40) / 4
    assert res.stats["p"].misses == 1
    assert res.score("p") == pytest.approx(75.0)
