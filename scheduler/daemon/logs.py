"""The daemon's log lines: one event per line, journald-aware, never a credential.

Under systemd (stderr is the journal stream named by $JOURNAL_STREAM) each line starts with a
syslog priority, `<3>` for errors and `<4>` for warnings (a failed job is logged as a
warning), and carries no timestamp: journald stamps every entry itself. Elsewhere lines carry
an ISO-8601 UTC time and the level name. Newlines inside a message (tracebacks, provider
errors) are written as a literal `\\n`, so one event is one line and one journal entry.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TextIO

from providers.masking import mask

# syslog(3) priorities, as sd-daemon(3) prefixes read them.
PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Libraries whose INFO lines are per-request noise; shown only at DEBUG.
NOISY = ("botocore", "boto3", "urllib3", "azure", "google", "apscheduler", "alembic")


def redact(text: str) -> str:
    """Database passwords, cloud keys, tokens and signatures masked wherever they appear, by
    the one masker the provider errors use too (providers/masking.py)."""
    return mask(text)


def journal_attached(stream: TextIO | None = None) -> bool:
    """True when `stream` (stderr) is the journal: $JOURNAL_STREAM names its device:inode.
    A child that inherited the variable but writes elsewhere (a pipe) is not attached."""
    value = os.environ.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        dev, ino = (int(x) for x in value.split(":", 1))
        st = os.fstat((stream or sys.stderr).fileno())
    except (ValueError, OSError, AttributeError):
        return True  # set but not checkable (a captured stream): trust the variable
    return (st.st_dev, st.st_ino) == (dev, ino)


class OneLineFormatter(logging.Formatter):
    """A record, its exception included, as one redacted line."""

    def __init__(self, journal: bool) -> None:
        fmt = (
            "%(name)s: %(message)s"
            if journal
            else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        super().__init__(fmt)
        self.journal = journal
        self.converter = time.gmtime

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        t = self.converter(record.created)
        return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        text = redact(super().format(record))
        text = text.replace("\r", "\\r").replace("\n", "\\n")
        if self.journal:
            return f"<{PRIORITY.get(record.levelno, 6)}>{text}"
        return text


def resolve_level(configured: str, override: str | None = None) -> str:
    """--log-level, else $SPOTWISE_LOG_LEVEL, else the config's log_level."""
    level = (override or os.environ.get("SPOTWISE_LOG_LEVEL") or configured).upper()
    if level not in LEVELS:
        from scheduler.core.errors import UserError

        raise UserError(f"unknown log level {level!r}: use one of {', '.join(LEVELS)}")
    return level


def configure(level: str, *, stream: TextIO | None = None, journal: bool | None = None) -> None:
    """Replace the root handlers with one line-per-event handler on stderr."""
    stream = stream or sys.stderr
    attached = journal_attached(stream) if journal is None else journal
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter(attached))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
