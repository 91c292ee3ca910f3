"""A pass reads progress.json for all its jobs at once: concurrently, outside every database
transaction, and never for longer than its deadline, however slow the store."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from providers.base import EndReason
from scheduler.core.states import JobState
from scheduler.daemon.checkpoints import ProgressReader, StoreError

JOBS = 4


def _write_progress(w, job_id: str, step: int, total: int = 1000) -> None:  # type: ignore[no-untyped-def]
    ckpt = w.tmp / "ckpt" / job_id
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "progress.json").write_text(json.dumps({"step": step, "total_steps": total}))


class _Watch:
    """What the database is doing while a progress read runs: open write transactions
    (Db.write) and connections checked out of the engine's pool (any transaction)."""

    def __init__(self, w, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        self.writes = 0
        self.connections = 0
        real = w.rec.db.write

        @contextmanager
        def write() -> Iterator[Any]:
            self.writes += 1
            try:
                with real() as s:
                    yield s
            finally:
                self.writes -= 1

        monkeypatch.setattr(w.rec.db, "write", write)
        self._pool = w.rec.engine.pool
        event.listen(self._pool, "checkout", self._out)
        event.listen(self._pool, "checkin", self._in)

    def _out(self, *_: object) -> None:
        self.connections += 1

    def _in(self, *_: object) -> None:
        self.connections -= 1

    def close(self) -> None:
        event.remove(self._pool, "checkout", self._out)
        event.remove(self._pool, "checkin", self._in)


@pytest.mark.parametrize("when", ["running", "ended"])
def test_a_pass_reads_every_progress_at_once_outside_any_transaction(make_world, monkeypatch, when):
    """Each read waits until all the pass's reads are in flight (a barrier with a timeout):
    reads made one by one break it, and a read made inside a transaction is recorded. Both
    the running jobs' reads and the last read of jobs whose attempt just ended."""
    w = make_world()
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(JOBS)]
    w.tick()
    assert all(w.job(j).state is JobState.RUNNING for j in ids)
    for n, j in enumerate(ids):
        _write_progress(w, j, 100 + n)
    if when == "ended":
        for inst in w.provider.running():
            w.provider.end(inst.id, EndReason.INTERRUPTED)
    watch = _Watch(w, monkeypatch)
    barrier = threading.Barrier(JOBS, timeout=2.0)
    real = w.rec.jobs.stores.progress
    seen: list[tuple[str, int, int]] = []
    problems: list[str] = []
    lock = threading.Lock()

    def progress(uri: str, job_id: str | None = None) -> dict[str, Any] | None:
        with lock:
            seen.append((uri, watch.writes, watch.connections))
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            with lock:
                problems.append(f"{uri}: read alone, not with the pass's other reads")
            raise
        return real(uri)

    monkeypatch.setattr(w.rec.jobs.stores, "progress", progress)
    try:
        w.tick()
    finally:
        watch.close()
    assert problems == []
    assert len(seen) == JOBS, seen  # once per job, not once per job and step
    inside = [(uri, writes, conns) for uri, writes, conns in seen if writes or conns]
    assert inside == [], "progress read inside a transaction"
    for n, j in enumerate(ids):
        assert w.job(j).progress_step == 100 + n


def test_a_slow_store_does_not_hold_the_pass_beyond_the_deadline(make_world, monkeypatch):
    """One store that hangs: the pass goes on at the deadline with what the others returned,
    and the hung job's progress is read again on a later pass."""
    w = make_world()
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(3)]
    w.tick()
    for n, j in enumerate(ids):
        _write_progress(w, j, 10 + n)
    slow = ids[1]
    release = threading.Event()
    real = w.rec.jobs.stores.progress

    def progress(uri: str, job_id: str | None = None) -> dict[str, Any] | None:
        if uri.endswith(slow):
            release.wait(timeout=30)
        return real(uri)

    monkeypatch.setattr(w.rec.jobs.stores, "progress", progress)
    w.rec.jobs.progress_reader.deadline = 0.5
    try:
        w.clock.advance(5)
        start = time.monotonic()
        w.rec.reconcile()
        took = time.monotonic() - start
    finally:
        release.set()
    assert took < 0.5 + 2.0, took
    assert [w.job(j).progress_step for j in ids] == [10, None, 12]
    assert all(w.job(j).state is JobState.RUNNING for j in ids)
    w.tick()
    assert [w.job(j).progress_step for j in ids] == [10, 11, 12]


def test_a_read_past_the_deadline_is_a_store_error_and_its_late_answer_is_dropped():
    class Stores:
        def __init__(self) -> None:
            self.release = threading.Event()

        def progress(self, uri: str, job_id: str | None = None) -> dict[str, Any] | None:
            if uri == "slow":
                self.release.wait(timeout=30)
                return {"step": 99}
            if uri == "bad":
                raise ValueError("not JSON")
            return {"step": 1}

    stores = Stores()
    reader = ProgressReader(stores, deadline=0.3, workers=2)  # type: ignore[arg-type]
    try:
        reads = reader.read({"a": "fast", "b": "slow", "c": "bad"})
    finally:
        stores.release.set()
    assert reads.progress("a") == {"step": 1}
    with pytest.raises(StoreError, match=r"no answer within 0\.3s"):
        reads.progress("b")
    with pytest.raises(ValueError, match="not JSON"):
        reads.progress("c")
    assert reads.progress("not-read") is None
    assert reader.read({}).values == {}
