"""Whether a folder the config names can hold the state: answered by reading only, so
`check-config` and the read commands, which write nothing, refuse what the daemon could not
create."""

from __future__ import annotations

import os
from pathlib import Path


def creatable(path: Path) -> str | None:
    """Why `path` cannot be a directory we create or use; None when it can. Reads only."""
    path = path.expanduser()
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe == path and not path.is_dir():
        return f"{path} exists and is not a directory"
    if not probe.is_dir():
        return f"{probe} is not a directory, so {path} cannot be created"
    if not os.access(probe, os.W_OK | os.X_OK):
        verb = "used" if probe == path else "created"
        return f"{path} cannot be {verb}: {probe} is not writable by this user"
    return None
