"""`spotwise bench daemon --quick` runs the real controllers and reports every figure."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from scheduler.cli import app


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
