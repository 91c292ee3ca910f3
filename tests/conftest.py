"""Every test gets its own state directory: nothing writes into the real ~/.local/state, and
parallel workers (pytest-xdist) never share a daemon lock or a database."""

from __future__ import annotations

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
