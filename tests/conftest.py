"""Every test gets its own state directory: nothing writes into the real ~/.local/state, and
parallel workers (pytest-xdist) never share a daemon lock or a database."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

# The in-memory world most daemon and state tests stand on (a Reconciler over fake clouds),
# and the checkpoint stores' emulators (`store_site`: each kind of store in turn).
pytest_plugins = ("tests.support.world", "tests.support.store_emulators")


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
        logger = logging.getLogger(name)
        if logger.level != was:  # setLevel clears every logger's cache: only where changed
            logger.setLevel(was)


# Real processes, servers, torchrun, campaigns and long property runs: `./dev test -m "not
# slow"` leaves them out for day-to-day work; CI runs everything. Slow by folder: the system
# suites (tests/system/) and the trainer's (real torch and torchrun). A single test elsewhere
# that starts the real CLI or a server, or takes over about 0.7 s on a 2-core machine,
# carries @pytest.mark.slow itself (a whole module: `pytestmark = pytest.mark.slow`).
SLOW_FOLDERS = ("tests/system/", "tests/trainer/")


def _slow_path(rel: str) -> bool:
    return rel.startswith(SLOW_FOLDERS)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With exactly `-m "not slow"`, slow modules are not even imported (torch, servers):
    a few seconds of every worker's start-up in the fast subset."""
    if config.option.markexpr.replace(" ", "") != "notslow":
        return None
    try:
        rel = collection_path.relative_to(Path(str(config.rootpath))).as_posix()
    except ValueError:
        return None
    return True if _slow_path(rel + ("/" if collection_path.is_dir() else "")) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        rel = Path(str(item.fspath)).relative_to(root).as_posix()
        if _slow_path(rel):
            item.add_marker(pytest.mark.slow)
