"""The real `spotwise` command line as a person runs it: a new process, an 80-column
terminal width ($COLUMNS), UTC, this checkout first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env(**extra: str) -> dict[str, str]:
    out = {**os.environ, "COLUMNS": "80", "TZ": "UTC", "PYTHONPATH": str(ROOT)}
    for key in ("SUDO_USER", "SUDO_UID", "SPOTWISE_CONFIG"):
        out.pop(key, None)
    out.update(extra)
    return out


def spotwise(
    *args: str, timeout: float = 60, stdin: str | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """`python -m scheduler ARGS`, its output captured (stdout is a pipe)."""
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env=env(**extra),
    )
