"""The job <-> scheduler contract: checkpoint-store locations and the small files in them.

Stdlib only, and the one place both sides parse a checkpoint URI, so the trainer, the
instance's wrapper and the scheduler can never disagree about where a file lives (a
``file://`` URI with ``%20`` in it once meant two different directories to them).

Layout under the job's checkpoint URI::

    step-<N>/          DCP checkpoints (a step without DCP's .metadata is incomplete)
    latest             "step-<N>", written last and atomically
    progress.json      step, total_steps, samples, updated_at, ... (rank 0)
    DONE               written once training completed
    owner.json         the attempt that owns the store (written by the daemon before launch)
    exits/<N>.json     how attempt N's command ended (written by the instance's wrapper)

Fencing: before an attempt is launched the daemon records it in ``owner.json``. A trainer
whose ``$SPOTWISE_ATTEMPT`` is lower than the owner's never advances ``latest`` (two live
attempts can never corrupt one job's checkpoints); see ``fenced()``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

LATEST = "latest"
PROGRESS = "progress.json"
DONE = "DONE"
OWNER = "owner.json"
EXITS = "exits"

ENV_JOB_ID = "SPOTWISE_JOB_ID"
ENV_ATTEMPT = "SPOTWISE_ATTEMPT"  # the attempt number, 1, 2, ...
ENV_CHECKPOINT_URI = "SPOTWISE_CHECKPOINT_URI"
ENV_CLOUD = "SPOTWISE_CLOUD"
# Gangs (nodes > 1): every node gets the gang's size, its own rank, one rendezvous id and
# node 0's address ("host:port"), so `python -m trainer --nnodes N` forms one process group.
ENV_NNODES = "SPOTWISE_NNODES"
ENV_NODE_RANK = "SPOTWISE_NODE_RANK"
ENV_RDZV_ENDPOINT = "SPOTWISE_RDZV_ENDPOINT"
ENV_RDZV_ID = "SPOTWISE_RDZV_ID"

EXIT_PREEMPTED = 75  # "preempted, a durable checkpoint exists: start me again"
EXIT_FENCED = 76  # "another attempt owns the store now: this one must not continue"
# Written by the boot script, never by a job: the instance's GPU never appeared (no NVIDIA
# driver answered nvidia-smi in time), so the job did not start; place it again elsewhere.
EXIT_NO_GPU = 77


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed checkpoint URI: a local directory, or a bucket and key prefix."""

    scheme: str  # "file" (plain paths too) or "s3"
    path: Path | None = None  # file
    bucket: str = ""  # s3
    prefix: str = ""  # s3, without leading or trailing "/"

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    def key(self, name: str) -> str:
        """The object key of `name` under an s3 prefix."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def file(self, name: str) -> Path:
        assert self.path is not None, "file() is for local locations"
        return self.path / name


def parse_uri(uri: str) -> Location:
    """``/path``, ``file:///path`` (percent-escapes decoded) or ``s3://bucket/prefix``.

    Raises ValueError for anything else, with the forms that are accepted.
    """
    if not uri or not uri.strip():
        raise ValueError("the checkpoint URI is empty")
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"checkpoint URI {uri!r} has no bucket (s3://BUCKET/prefix)")
        return Location("s3", bucket=parsed.netloc, prefix=unquote(parsed.path).strip("/"))
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"checkpoint URI {uri!r}: file:// URIs name no host")
        return Location("file", path=Path(unquote(parsed.path)))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Location("file", path=Path(uri).expanduser())
    raise ValueError(
        f"unsupported checkpoint URI scheme in {uri!r} (use a path, file:///path or s3://bucket/p)"
    )


def to_uri(path: Path) -> str:
    """The file:// URI of a local directory (escapes as RFC 8089 wants them)."""
    return path.resolve().as_uri()


def exit_name(attempt: int) -> str:
    return f"{EXITS}/{attempt}.json"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def owner_doc(attempt: int, attempt_id: str, job_id: str) -> str:
    return (
        json.dumps(
            {
                "attempt": attempt,
                "attempt_id": attempt_id,
                "job_id": job_id,
                "written_at": utc_now(),
            }
        )
        + "\n"
    )


def exit_doc(attempt: int, exit_code: int) -> str:
    return json.dumps({"attempt": attempt, "exit_code": exit_code, "at": utc_now()}) + "\n"


def parse_json(text: str | None) -> dict[str, Any] | None:
    """A small contract file's content, or None when absent or half-written."""
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def owner_attempt(owner_text: str | None) -> int | None:
    """The attempt number recorded in owner.json, or None when there is no usable record."""
    doc = parse_json(owner_text)
    value = doc.get("attempt") if doc else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def my_attempt(env: dict[str, str] | None = None) -> int | None:
    """This process's attempt number from the environment (None outside the scheduler)."""
    raw = (env if env is not None else os.environ).get(ENV_ATTEMPT, "")
    return int(raw) if raw.isdigit() else None


def fenced(owner_text: str | None, attempt: int | None) -> bool:
    """True when another (newer) attempt owns the store and this one must not write to it."""
    owner = owner_attempt(owner_text)
    return attempt is not None and owner is not None and owner > attempt
