"""What the deadline bench reports: the published-figure check, bootstrap intervals,
per-window comparisons."""

from __future__ import annotations

import pytest

from scheduler.lab.replay.bench_settings import adrs_multi, skynomad_3zone
from scheduler.lab.replay.scenarios import Case, CaseResult, PublishedCheck, Setting, collect

pytestmark = pytest.mark.timeout(30)


def _result(check: PublishedCheck | None, kind: str = "score"):  # type: ignore[no-untyped-def]
    dummy = adrs_multi(quick=True).cases[0]
    cases = tuple(Case(f"c{i}", dummy.trace, (0,), dummy.job) for i in range(4))
    setting = Setting("k", "t", cases, {"base": 50.0}, kind, check=check)
    results = []
    for i in range(4):
        costs = {"on-demand": [100.0, 100.0], "uniform-progress": [50.0 + i, 52.0 + i],
                 "spotwise": [45.0 + i, 60.0]}  # fmt: skip
        results.append(CaseResult(costs, dict.fromkeys(costs, 0), [100.0] * 2, [0.0] * 2,
                                  f"c{i}", [f"c{i}"] * 2))  # fmt: skip
    return collect(setting, results)


def test_published_figures_shown_only_when_reproduced() -> None:
    res = _result(PublishedCheck("uniform-progress", "base", 2.0))
    # UP costs 52.5 on average -> score 47.5, 2.5 points off the published 50
    assert res.score("uniform-progress") == pytest.approx(47.5)
    shown, why = res.published_status()
    assert not shown and "different simulator" in why
    shown, why = _result(PublishedCheck("uniform-progress", "base", 3.0)).published_status()
    assert shown and "reproduces" in why
    shown, why = _result(None).published_status()
    assert not shown and "dropped" in why
    res = _result(PublishedCheck("uniform-progress", "base", 0.5, "c0"), "cost")
    shown, why = res.published_status()
    assert not shown  # UP costs 51 on c0's windows, published 50 +- 0.5: outside


def test_intervals_and_window_comparisons() -> None:
    res = _result(None)
    lo, hi = res.score_ci("spotwise")
    assert lo <= res.score("spotwise") <= hi and hi - lo > 0
    assert res.score_ci("on-demand") == pytest.approx((0.0, 0.0))
    assert res.worse_than("spotwise") == pytest.approx(50.0)  # the 60s lose, the rest win
    assert res.worst_vs_on_demand("spotwise") == pytest.approx(0.6)
    assert res.above_on_demand("spotwise") == 0.0
    d, dlo, dhi = res.delta("spotwise", ("uniform-progress",))
    assert d == pytest.approx(res.score("spotwise") - res.score("uniform-progress"))
    assert dlo <= d <= dhi


def test_skynomad_setting_has_twenty_plus_start_times() -> None:
    s = skynomad_3zone()
    starts = [x for c in s.cases for x in c.starts]
    assert len(set(starts)) >= 20
    assert s.cases[0].label == "published 5" and len(s.cases[0].starts) == 5
    assert s.check is not None and s.check.case == "published 5"
