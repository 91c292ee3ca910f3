"""Where the migrations are and which revision is the newest, with the standard library
alone: every command compares the database's revision with the newest one, and importing
Alembic (or SQLAlchemy) to ask would cost a read command half a second."""

from __future__ import annotations

import re
from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
LEGACY_REVISION = "0001"  # what a 0.1 database (create_all, no alembic_version) matches

_REVISION = re.compile(r'^revision\s*=\s*"([^"]+)"', re.M)
_DOWN_REVISION = re.compile(r'^down_revision\s*=\s*(?:"([^"]+)"|None)', re.M)


def head_revision() -> str:
    """The newest migration's revision, read from the migration files' `revision` and
    `down_revision` lines (tests check this agrees with Alembic's own answer)."""
    revisions: dict[str, str | None] = {}
    for path in (MIGRATIONS / "versions").glob("[0-9]*.py"):
        text = path.read_text()
        rev, down = _REVISION.search(text), _DOWN_REVISION.search(text)
        if rev is None or down is None:
            raise RuntimeError(f"{path}: no revision/down_revision line")
        revisions[rev.group(1)] = down.group(1)
    heads = set(revisions) - set(revisions.values())
    if len(heads) != 1:
        raise RuntimeError(f"{MIGRATIONS}: expected one head revision, found {sorted(heads)}")
    return heads.pop()
