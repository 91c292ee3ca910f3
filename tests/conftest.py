"""Every test gets its own state directory: nothing writes into the real ~/.local/state, and
parallel workers (pytest-xdist) never share a daemon lock or a database."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    home = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.delenv("SPOTWISE_CONFIG", raising=False)
    return home


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that configures logging (as the daemon does: root handlers, library levels)
    must not change what a later test on the same worker logs: that made a test of
    botocore's debug output depend on which tests ran before it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    named = {n: logging.getLogger(n).level for n in logging.root.manager.loggerDict}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in named.items():
        logging.getLogger(name).setLevel(was)


# Real processes, torchrun, campaigns and long property runs: `./dev test -m "not slow"`
# leaves them out for day-to-day work; CI runs everything.
SLOW = (
    "tests/test_e2e_local.py",
    "tests/test_demo.py",
    "tests/test_campaign.py",
    "tests/trainer/",
    "tests/providers/test_local_processes.py",
    "tests/providers/test_local_robustness.py",
    "tests/scheduler/test_budget_property.py",
    "tests/scheduler/test_bench_daemon.py",
    "tests/test_fuzz.py",
    "tests/replay/test_bench.py",
    "tests/replay/test_adrs.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        rel = Path(str(item.fspath)).relative_to(root).as_posix()
        if rel.startswith(SLOW) or "daemon" in rel.rsplit("/", 1)[-1]:
            item.add_marker(pytest.mark.slow)
