"""100 clients at once against one API server beside the real daemon, for a bounded time on
loopback: every request answered without an error, and every job a client was given an id
for is in the server's status and in the database, under that client's user."""

from __future__ import annotations

from pathlib import Path

from scheduler.lab.bench_api import run


def test_a_hundred_clients_submit_and_read_and_no_job_is_lost(tmp_path: Path) -> None:
    doc = run(clients=100, seconds=5.0, workdir=tmp_path)
    assert doc["errors"] == 0, doc["first_errors"]
    assert doc["jobs_submitted"] >= 100 and doc["jobs_lost"] == []
    assert doc["daemon_alive"]
    assert set(doc["kinds"]) == {"submit", "status", "show"}
    assert doc["per_second"] > 10, doc  # loose: a loaded 2-core machine still serves
    figures = doc["all"]
    assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"] <= figures["max_ms"]
