"""`spotwise bench deadline --quick -o json`: one JSON document, all policies, sane numbers."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from scheduler.cli.bench import bench_app


@pytest.mark.timeout(120)
def test_bench_deadline_quick_json() -> None:
    result = CliRunner().invoke(bench_app, ["deadline", "--quick", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["benchmark"] == "deadline" and doc["quick"] is True
    keys = [s["setting"] for s in doc["settings"]]
    assert keys == [
        "single-region", "multi-region", "skynomad-3zone", "adrs-multi", "price-spike", "gang"
    ]  # fmt: skip
    by_key = {s["setting"]: s for s in doc["settings"]}
    # published figures only where the in-run baseline reproduces them
    sky = by_key["skynomad-3zone"]
    assert "reproduces" in sky["published_check"] and sky["published"]["UP(S)"] == 47.02
    adrs = by_key["adrs-multi"]
    assert "different simulator" in adrs["published_check"] and adrs["published"] == {}
    for key in ("price-spike", "gang"):  # the test split's 2023 part alone, and said so
        assert by_key[key]["windows_from"] == (
            "test split: 2023 second half on us-east-1c, us-east-1f, us-east-2b, us-west-2a,"
            " us-west-2c"
        )
    for s in doc["settings"]:
        rows = {r["policy"]: r for r in s["policies"]}
        for r in rows.values():
            lo, hi = r["score_ci95"]
            assert lo is None or lo - 1e-6 <= r["score"] <= hi + 1e-6 or s["clusters"] < 3
            assert 0.0 <= r["worse_than_up_pct"] <= 100.0
        assert rows["uniform-progress"]["worse_than_up_pct"] == 0.0
        assert rows["spotwise"]["worst_vs_on_demand"] <= 1.05 + 1e-6
        assert set(rows) == {
            "on-demand", "greedy", "uniform-progress", "spotwise", "spotwise-cold", "optimal"
        }  # fmt: skip
        assert rows["spotwise-cold"]["deadline_misses"] == 0
        assert rows["spotwise-cold"]["worst_vs_on_demand"] <= 1.05 + 1e-6
        assert rows["spotwise"]["ms_per_decision"] > 0
        assert rows["optimal"]["ms_per_decision"] is None
        assert rows["optimal"]["ratio_to_optimal"] == pytest.approx(1.0)
        if s["setting"] == "adrs-multi":  # fixed anchors 3.06 x 48, 0.9731 x 48
            assert s["all_on_demand_cost_usd"] == pytest.approx(146.88)
            assert s["all_spot_cost_usd"] == pytest.approx(46.7088)
            assert rows["on-demand"]["avg_cost_usd"] == pytest.approx(48.2 * 3.06)
        else:
            assert rows["on-demand"]["score"] == pytest.approx(0.0, abs=1e-6)
        for r in rows.values():
            assert r["avg_cost_usd"] >= rows["optimal"]["avg_cost_usd"] - 1e-6
        assert rows["spotwise"]["deadline_misses"] == 0
        assert rows["spotwise"]["avg_cost_usd"] < rows["on-demand"]["avg_cost_usd"]


@pytest.mark.timeout(120)
def test_bench_deadline_sweep_quick_json() -> None:
    result = CliRunner().invoke(bench_app, ["deadline", "--sweep", "--quick", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["sweep"] is True and doc["split"] == "test"
    assert [s["setting"] for s in doc["settings"]] == [
        "sweep o=0.05 slack=1.2",
        "sweep o=1 slack=1.2",
    ]
    for s in doc["settings"]:
        rows = {r["policy"]: r for r in s["policies"]}
        assert set(rows) == {"on-demand", "greedy", "uniform-progress", "spotwise", "spotwise-cold"}
        assert rows["spotwise-cold"]["deadline_misses"] == 0
        assert s["runs"] == 2 and s["windows_from"].startswith("test split")
        assert rows["spotwise"]["deadline_misses"] == 0
        assert rows["spotwise"]["worst_vs_on_demand"] <= 1.05 + 1e-6
        assert "score" in s["spotwise_minus_best_baseline"]
        assert s["spotwise_minus_best_single_zone"]["runs"] == 1  # one 2022 trace
        assert s["spotwise_minus_best_multi_zone"]["runs"] == 1  # one zone set
    table = CliRunner().invoke(bench_app, ["deadline", "--sweep", "--quick"])
    assert table.exit_code == 0 and "spotwise - best" in table.stdout


@pytest.mark.timeout(120)
def test_bench_placement_quick_json() -> None:
    args = ["placement", "--quick", "--jobs-count", "200", "-o", "json"]
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["catalog_rows"] > 90_000 and doc["offerings"] > doc["catalog_rows"]
    assert {s["request"] for s in doc["single"]} >= {"A100:8", "H100:1", "T4:1", "H100:8"}
    assert all(s["same_choice"] for s in doc["single"])
    assert all(s["chosen"] for s in doc["single"])
    q = doc["queue"]
    assert q["jobs"] == 200 and q["mismatches"] == 0 and 0 < q["placed"] <= 200


@pytest.mark.timeout(120)
def test_bench_sweep_windows_sets_the_start_windows_per_trace_and_length() -> None:
    """`--windows N`: N start windows per trace or zone set, task length and cell (the
    constants are tuned on `--split train --windows 8`, which a reader can rerun)."""
    args = ["deadline", "--sweep", "--quick", "--split", "train", "--windows", "3", "-o", "json"]
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["split"] == "train"
    assert [s["runs"] for s in doc["settings"]] == [6, 6]  # 2 periods x 3 windows


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--windows", "3"],
         "--windows applies to --sweep only (the other settings' windows are fixed)"),
        (["--sweep", "--windows", "999"], "--windows must be 1 to 32"),
        (["--sweep", "--windows", "-1"], "--windows must be 1 to 32"),
        (["--sweep", "--windows", "0"], "--windows must be 1 to 32"),
        (["--windows", "0"],
         "--windows applies to --sweep only (the other settings' windows are fixed)"),
    ],
)  # fmt: skip
def test_bench_windows_out_of_place_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    result = CliRunner().invoke(bench_app, ["deadline", *args])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [says]


@pytest.mark.timeout(120)
def test_tables_round_each_figure_once_and_json_to_its_digits(monkeypatch) -> None:
    """A measured +4.2514 prints as +4.3: the doc keeps figures unrounded and the tables
    round once (rounded to 4.25 first, it printed as +4.2, a figure the run did not give);
    the JSON still gives two digits."""
    from scheduler.lab.replay.scenarios import SettingResult

    monkeypatch.setattr(SettingResult, "delta", lambda self, p, o: (4.2514, 3.2504, 5.0))
    args = ["deadline", "--sweep", "--quick"]
    text = CliRunner().invoke(bench_app, args, env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "+4.3 [3.3, 5.0]" in text.output and "+4.2 " not in text.output
    out = CliRunner().invoke(bench_app, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    first = json.loads(out.stdout)["settings"][0]
    assert first["spotwise_minus_best_baseline"]["score"] == 4.25
    assert first["spotwise_minus_best_baseline"]["ci95"] == [3.25, 5.0]
    assert all(len(str(r["worst_vs_on_demand"]).split(".")[-1]) <= 4 for r in first["policies"])


def test_a_score_zero_but_for_float_error_prints_as_0_0() -> None:
    """On-demand's score is (od - od) / (od - spot): -1e-15 printed as "-0.0" once the doc
    kept figures unrounded."""
    from scheduler.lab.bench import _num

    assert f"{_num(-1e-15):.1f}" == "0.0" and _num(float("nan")) is None
    assert _num(-0.04) == -0.04  # a real small loss keeps its sign


def _cell(key: str, clusters: list[str], spotwise: list[float]):
    """A sweep cell's result over one window per cluster (greedy and UP at 80 and 90)."""
    from scheduler.lab.replay.scenarios import CaseResult, Setting, collect

    n = len(clusters)
    costs = {"greedy": [80.0] * n, "uniform-progress": [90.0] * n, "spotwise": spotwise}
    case = CaseResult(costs, dict.fromkeys(costs, 0), [100.0] * n, [30.0] * n, key, clusters)
    return collect(Setting(key, key, ()), [case])


def test_pooled_delta_averages_cells_over_the_same_bootstrap_draws() -> None:
    from scheduler.lab.replay.scenarios import pooled_delta

    best = ("greedy", "uniform-progress")
    traces = ["a", "b", "c", "d", "e"]
    one = _cell("sweep o=1 slack=2", traces, [70.0, 85.0, 75.0, 90.0, 60.0])
    other = _cell("sweep o=1 slack=1.5", traces, [82.0, 79.0, 81.0, 70.0, 95.0])
    d1, d2 = one.delta("spotwise", best), other.delta("spotwise", best)
    point, lo, hi = pooled_delta([one, other], "spotwise", best)
    assert point == pytest.approx((d1[0] + d2[0]) / 2) and lo < point < hi
    # a cell pooled with its twin (same windows, computed apart) keeps its own interval only
    # if each replicate b resamples the same traces in both
    twin = _cell("sweep o=0.5 slack=2", traces, [70.0, 85.0, 75.0, 90.0, 60.0])
    assert pooled_delta([one, twin], "spotwise", best) == pytest.approx(d1)
    # cells over different traces cannot share draws: no interval
    apart = _cell("sweep o=1 slack=1.2", ["a", "b", "c", "d", "x"], [70.0] * 5)
    assert math.isnan(pooled_delta([one, apart], "spotwise", best)[1])


@pytest.mark.timeout(120)
def test_sweep_prints_the_averages_over_each_overhead_and_the_grid() -> None:
    args = ["deadline", "--sweep", "--quick"]
    doc = json.loads(CliRunner().invoke(bench_app, [*args, "-o", "json"]).stdout)
    rows = {r["overhead"]: r for r in doc["sweep_average"]}
    assert list(rows) == ["0.05", "1", "all"] and rows["all"]["cells"] == 2
    cells = [s["spotwise_minus_best_baseline"]["score"] for s in doc["settings"]]
    assert rows["all"]["all"]["score"] == pytest.approx(sum(cells) / 2, abs=0.011)
    # quick: one cell per overhead, so each overhead's row is its cell, kind by kind
    for s in doc["settings"]:
        row = rows[s["setting"].split()[1].removeprefix("o=")]
        assert row["cells"] == 1
        assert row["all"] == {k: s["spotwise_minus_best_baseline"][k] for k in ("score", "ci95")}
        for kind in ("single_zone", "multi_zone"):
            assert row[kind]["score"] == s[f"spotwise_minus_best_{kind}"]["score"]
    text = CliRunner().invoke(bench_app, args, env={"COLUMNS": "80"}).stdout
    assert "spotwise - best averaged over the cells" in text
