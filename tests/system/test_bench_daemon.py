"""`spotwise bench daemon --quick` runs the real controllers and reports every figure."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from scheduler.cli.app import app
from scheduler.lab.bench_daemon import Row, verdicts


def test_bench_daemon_quick_json():
    result = CliRunner().invoke(app, ["bench", "daemon", "--quick", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    rows = doc["rows"]
    assert {(r["jobs"], r["history"]) for r in rows} == {(10, 0), (100, 0), (10, 100), (100, 100)}
    for r in rows:
        assert r["launch_pass_cpu_s"] > 0 and r["steady_pass_cpu_s"] > 0
        assert r["status_ms"] > 0 and r["rss_mb"] > 0 and r["idle_cpu_pct"] >= 0
        assert r["status_cli_ms"] > r["status_ms"] and r["end_pass_cpu_s"] > 0
    assert any("per-job launch-pass cost" in v for v in doc["verdicts"])


def _row(jobs: int, history: int, *, launch_ms: float, status_ms: float, rss: float) -> Row:
    return Row(
        jobs=jobs, history=history, launch_pass_cpu_s=launch_ms * jobs / 1000,
        launch_per_job_ms=launch_ms, steady_pass_cpu_s=1.0, steady_per_job_ms=0.1,
        accrue_cpu_s=0.1, status_ms=status_ms, status_cpu_ms=status_ms, status_cli_ms=900.0,
        end_pass_cpu_s=1.0, idle_cpu_pct=0.2, rss_mb=rss,
    )  # fmt: skip


def test_verdicts_judge_each_target_on_the_row_it_names():
    """Launch and status at the largest size; idle and memory where the fewest jobs are
    active (the target is about finished jobs): a 10,000-job heap is not an idle daemon."""
    rows = [
        _row(100, 10000, launch_ms=0.8, status_ms=150.0, rss=121.0),
        _row(10000, 10000, launch_ms=2.0, status_ms=320.0, rss=206.0),
    ]
    said = "\n".join(verdicts(rows))
    assert "per-job launch-pass cost at 10000 is 2.50x that at 100 (target <= 2x): NOT met" in said
    assert "launch pass of 10000 jobs 20.00 CPU-s (target < 10 s at 10,000): NOT met" in said
    assert "over 20000 jobs 320 ms (320 ms CPU; target < 300 ms at 10,000): NOT met" in said
    assert "idle with 100 active jobs 0.20% of a core, 121 MB" in said and said.endswith(": met")
    rows[0] = _row(100, 10000, launch_ms=0.8, status_ms=150.0, rss=151.0)
    assert verdicts(rows)[-1].endswith(": NOT met")
