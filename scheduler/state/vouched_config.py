"""A read command's fast way in: the daemon's record vouches for the operator's config.

A read command must refuse a bad config exactly as `check-config` does, so it normally
validates the file, and that (pydantic and every cloud's settings) is most of what `status`
and `show` cost. But when the daemon keeping the database validated these very bytes with
this very spotwise, the answer is already known: the record it keeps beside its heartbeat
(`state.running_config.record`) names the SHA-256 of the text it validated and its version,
and carries what read commands need of the config (`core.read_settings`). Then nothing is
validated again. Anything else (no file the daemon read, an edited one, another version, a
database that is not SQLite, no daemon yet, a record this spotwise cannot read) takes the
validating path, whose every error is `check-config`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.core.errors import UserError, parse_toml
from scheduler.core.read_settings import ReadSettings
from scheduler.core.state_dir import default_database_url, default_state_dir
from scheduler.state import installed
from scheduler.state.files import find_config, read_text_file, source_digest
from scheduler.state.read_connection import sqlite_file


def config_text(given: str | Path | None) -> tuple[Path | None, str] | None:
    """(the config file found, its text; None and "" for the built-in defaults), or None
    when it cannot be read (the validating path says why)."""
    found = find_config(given)
    if found is None:
        return None, ""
    try:
        return found, read_text_file(found, "config file")
    except UserError:
        return None


def sqlite_database(text: str) -> Path | None:
    """The SQLite file a config's text names (its `daemon.database_url`, else the default
    under its `daemon.state_dir`), read without validating; None for any other database or
    anything that is not plainly a string where one belongs."""
    try:
        doc = parse_toml(text, "")  # every failure a UserError: the validating path says it
    except UserError:
        return None
    daemon: Any = doc.get("daemon", {})
    if not isinstance(daemon, dict):
        return None
    url, state_dir = daemon.get("database_url"), daemon.get("state_dir")
    if url is None:
        if state_dir is None:
            base = default_state_dir()
        elif isinstance(state_dir, str) and state_dir.startswith("/"):
            base = Path(state_dir)
        else:
            return None
        url = default_database_url(base.expanduser())
    if not isinstance(url, str):
        return None
    found = sqlite_file(url)
    return found if found is not None and found.is_absolute() else None


def vouched(record_text: str | None, found: Path | None, text: str) -> ReadSettings | None:
    """What the daemon's record says read commands need, when it vouches for `text` (the
    file `found`, None: the built-in defaults); else None."""
    if not record_text:
        return None
    try:
        doc = json.loads(record_text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("source_sha256") != source_digest(text):
        return None
    if (doc.get("path") is None) != (found is None):  # a file the daemon did not read
        return None
    # Another spotwise's rules, or one that cannot say which it is, vouch for nothing.
    if doc.get("spotwise") in (None, installed.UNKNOWN) or doc["spotwise"] != installed.version():
        return None
    return ReadSettings.from_json(doc.get("read"))
