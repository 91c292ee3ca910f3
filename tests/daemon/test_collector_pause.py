"""A job step and a launch call hold off cyclic collection while they run, and always give
it back: after the pass, after a crash inside it, nested or overlapping."""

from __future__ import annotations

import gc
import threading

import pytest

from scheduler.daemon.controllers.base import _CollectorPause
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.daemon.reconcile import Reconciler


def test_collection_is_paused_inside_and_resumed_after_even_on_error() -> None:
    pause = _CollectorPause()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), pause():
        assert not gc.isenabled()
        with pause():  # nested (a retry round inside a pass)
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pass still runs
        raise RuntimeError("a failed step")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    pause = _CollectorPause()
    gc.disable()
    try:
        with pause():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_passes_on_two_threads_resume_when_the_last_ends() -> None:
    pause = _CollectorPause()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with pause():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with pause():
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's pass still runs
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_a_pass_steps_and_launches_with_collection_paused_and_resumes_it(make_world) -> None:
    """The real pass: placement and the cloud call run paused (seen from the provider, on
    its pool thread), and a crash between claim and launch still resumes collection."""
    w = make_world()
    seen: list[tuple[str, bool]] = []
    real_launch = w.provider.launch

    def launch(req):  # type: ignore[no-untyped-def]
        seen.append(("launch", gc.isenabled()))
        return real_launch(req)

    w.provider.launch = launch  # type: ignore[method-assign]

    def crash(name: str) -> None:
        seen.append((name, gc.isenabled()))
        if name == "after_claim":
            raise CrashForTest(name)

    crashing = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock, crash_hook=crash)
    crashing.poll_prices()
    w.submit(gpus="V100:1")
    w.clock.advance(5)
    with pytest.raises(CrashForTest):
        crashing.reconcile()
    assert ("after_claim", False) in seen and gc.isenabled()
    seen.clear()
    w.tick()  # the normal daemon relaunches with the same token
    assert seen == [("launch", False)] and gc.isenabled()
