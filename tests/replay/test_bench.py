"""`spotwise bench deadline --quick -o json`: one JSON document, all policies, sane numbers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from scheduler.bench import bench_app


@pytest.mark.timeout(120)
def test_bench_deadline_quick_json() -> None:
    result = CliRunner().invoke(bench_app, ["deadline", "--quick", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["benchmark"] == "deadline" and doc["quick"] is True
    keys = [s["setting"] for s in doc["settings"]]
    assert keys == ["single-region", "multi-region", "skynomad-3zone"]
    for s in doc["settings"]:
        rows = {r["policy"]: r for r in s["policies"]}
        assert set(rows) == {"on-demand", "greedy", "uniform-progress", "spotwise", "optimal"}
        assert rows["optimal"]["ratio_to_optimal"] == pytest.approx(1.0)
        assert rows["on-demand"]["score"] == pytest.approx(0.0, abs=1e-6)
        for r in rows.values():
            assert r["avg_cost_usd"] >= rows["optimal"]["avg_cost_usd"] - 1e-6
        assert rows["spotwise"]["deadline_misses"] == 0
        assert rows["spotwise"]["avg_cost_usd"] < rows["on-demand"]["avg_cost_usd"]
