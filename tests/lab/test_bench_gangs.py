"""`spotwise bench gangs`: the document and its tables have their shape. The local runs are
the benchmark's (minutes, real trainers): here their summary and cost are checked on made-up
samples, and the command runs its replay part."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scheduler.lab.bench_gangs import (
    STRATEGIES,
    Sample,
    distribution,
    gangs_table,
    interval_cost,
    summarise,
)

pytestmark = pytest.mark.timeout(120)


def test_the_distribution_and_the_summary_per_size_and_recovery() -> None:
    d = distribution([4.0, 1.0, 3.0, 2.0, 5.0])
    assert d == {"n": 5, "mean": 3.0, "median": 3.0, "p10": 1.4, "p90": 4.6, "min": 1.0,
                 "max": 5.0}  # fmt: skip
    assert distribution([]) == {"n": 0}
    samples = [
        Sample(2, "replace", 10.0, 0.01, 1), Sample(2, "replace", 12.0, 0.02, 1),
        Sample(2, "whole", 20.0, 0.03, 2), Sample(2, "whole", None, None, 0, "not resumed"),
        Sample(4, "replace", 15.0, 0.05, 1),
    ]  # fmt: skip
    rows = summarise(samples)
    assert [(r["nodes"], r["strategy"]) for r in rows] == [(2, "replace"), (2, "whole"),
                                                          (4, "replace")]  # fmt: skip
    rep, whole, _ = rows
    assert (rep["runs"], rep["resumed"], rep["kept_attempt"]) == (2, 2, 2)
    assert rep["seconds"]["median"] == 11.0 and rep["usd"]["max"] == 0.02
    assert (whole["runs"], whole["resumed"], whole["kept_attempt"]) == (2, 1, 0)


def test_the_interval_cost_is_each_node_at_its_price_over_its_overlap() -> None:
    detail = {"attempts": [
        {"price_per_hour": 3.6, "instances": [
            {"started_at": "2026-12-01T00:00:00Z", "ended_at": None},  # waits: all of it
            {"started_at": "2026-12-01T00:00:00Z", "ended_at": "2026-12-01T00:00:12Z"},
            {"started_at": "2026-12-01T00:00:20Z", "ended_at": None},  # the replacement
        ]},
    ]}  # fmt: skip
    t0 = 1796083200.0 + 10  # 2026-12-01T00:00:10Z
    usd = interval_cost(detail, t0, t0 + 20)
    assert usd == pytest.approx(3.6 * (20 + 2 + 10) / 3600)


@pytest.mark.slow
def test_the_command_prints_the_document_and_an_80_column_table() -> None:
    run = [sys.executable, "-m", "scheduler", "bench", "gangs", "--replay-only", "--quick"]
    r = subprocess.run([*run, "-o", "json"], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"commit", "machine", "quick", "local", "replay", "elapsed_s"}
    assert doc["machine"]["cores"] >= 1 and doc["local"] == {"samples": [], "summary": []}
    assert {(r["nodes"], r["case"].split(",")[1].strip()) for r in doc["replay"]} == {
        (n, z) for n in (2, 4) for z in ("3 zones", "1 zone")
    }
    for row in doc["replay"]:
        for path in STRATEGIES:
            p = row[path]
            assert p["mean_usd"] > 0 and p["usd"]["n"] == row["windows"] == 2
            assert p["misses"] >= 0 and p["mean_finish_h"] > 0
        assert row["whole"]["replacements"] == 0 and row["replace"]["replacements"] > 0
    made_up = [Sample(2, "replace", 10.0, 0.01, 1), Sample(2, "whole", None, None, 0)]
    lines = gangs_table({**doc, "local": {"samples": [], "summary": summarise(made_up)}})
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert any(line.split()[:2] == ["2", "replace"] for line in lines)
    table = subprocess.run([*run, "--nodes", "2"], capture_output=True, text=True, timeout=90,
                           env={**os.environ, "COLUMNS": "80"})  # fmt: skip
    assert table.returncode == 0 and "replace $" in table.stdout
    bad = subprocess.run([*run, "--nodes", "9"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--nodes takes 2 to 8" in bad.stderr
