"""`spotwise bench cli`: the document and its table have their shape. The timings are the
machine's and are not checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.cli.bench import cli_table
from scheduler.lab import bench_cli

FIELDS = {
    "case", "args", "database", "median_ms", "p90_ms", "min_ms", "cpu_ms", "over_bare_ms",
    "target_ms", "target_over_bare_ms", "met",
}  # fmt: skip


def _check(doc: dict, names: list[str], runs: int) -> None:
    assert doc["benchmark"] == "cli" and doc["runs"] == runs and doc["cpus"] >= 1
    assert doc["program"] and doc["python"].count(".") == 2
    assert [c["case"] for c in doc["cases"]] == names
    bare, *cases = doc["cases"]
    assert bare["args"] is None and bare["over_bare_ms"] is None and bare["met"] is None
    for c in doc["cases"]:
        assert set(c) == FIELDS
        assert 0 < c["min_ms"] <= c["median_ms"] <= c["p90_ms"] and c["cpu_ms"] >= 0
    for c in cases:
        assert c["args"] and isinstance(c["over_bare_ms"], float)
        assert (c["met"] is None) == (c["target_ms"] is None and c["target_over_bare_ms"] is None)
    lines = cli_table(doc)
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert lines[1].split()[:3] == ["case", "median", "ms"] and len(lines) == len(names) + 5
    assert json.loads(json.dumps(doc)) == doc


def test_the_document_has_every_figure_and_the_table_fits_80_columns():
    doc = bench_cli.run(runs=2, only=["--version"])
    _check(doc, [bench_cli.BARE, "--version"], 2)
    (version,) = (c for c in doc["cases"] if c["case"] == "--version")
    assert version["target_over_bare_ms"] == 100 and version["met"] in (True, False)


def test_percentiles_are_nearest_rank():
    values = [float(x) for x in range(1, 21)]
    assert bench_cli.percentile(values, 90) == 18.0 and bench_cli.percentile(values, 50) == 10.0
    assert bench_cli.percentile([5.0], 90) == 5.0


@pytest.mark.slow
def test_quick_run_through_the_console_script(tmp_path):
    """Every case, with its databases, through `spotwise bench cli --quick -o json`."""
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler", "bench", "cli", "--quick", "--runs", "1",
         "--jobs-count", "50", "-o", "json"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    _check(doc, [c.name for c in bench_cli.CASES], 1)
    assert doc["large_jobs"] == 50
