"""Which spotwise is installed: its version, read from the distribution's metadata file.

`spotwise --version` prints it, the daemon logs it and records it beside the config it
validated, and a read command compares it with its own before it trusts that record
(`state.vouched_config`). The metadata file is read directly where it is found on the path:
importing importlib.metadata to find it costs more than the rest of `--version`.
"""

from __future__ import annotations

import os
import sys

UNKNOWN = "unknown"  # a source tree that was never installed


def version() -> str:
    """'X.Y.Z' of the installed spotwise, or 'unknown'."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("spotwise-") and name.endswith(".dist-info"):
                found = _metadata_version(os.path.join(entry, name, "METADATA"))
                if found:
                    return found
    try:
        from importlib.metadata import version as installed

        return installed("spotwise")
    except Exception:
        return UNKNOWN


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip() or None
                if not line.strip():  # the headers end at the first blank line
                    return None
    except OSError:
        pass
    return None
