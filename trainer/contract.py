"""The job <-> scheduler contract: checkpoint-store locations and the small files in them.

Stdlib only, and the one place both sides parse a checkpoint URI, so the trainer, the
instance's wrapper and the scheduler can never disagree about where a file lives (a
``file://`` URI with ``%20`` in it once meant two different directories to them).

Layout under the job's checkpoint URI::

    step-<N>/          DCP checkpoints (a step without DCP's .metadata is incomplete)
    latest             "step-<N>", written last and atomically
    progress.json      step, total_steps, samples, updated_at, ... (rank 0)
    DONE               written once training completed
    owner.json         the job and attempt that own the store (written by the daemon)
    exits/<N>.json     how attempt N's command ended (written by the instance's wrapper)

Stores: a local directory (a path or ``file://``), ``s3://bucket/prefix`` (S3 or
S3-compatible), ``gs://bucket/prefix`` (Google Cloud Storage) and
``az://container@account/prefix`` (Azure Blob Storage; ``az://container/prefix`` takes the
account from ``$AZURE_STORAGE_ACCOUNT_NAME``).

Fencing: before an attempt is launched the daemon records it in ``owner.json``, then
rewrites ``latest`` unchanged, so its version moves. A trainer writes ``latest`` only as a
conditional write against the version it last saw, and never when ``owner.json`` names
another job or a newer attempt of its own: two attempts can never both advance ``latest``
(``fenced()``). ``DONE``, ``progress.json`` and the exit records name the job that wrote
them; the daemon ignores those another job wrote (``written_by()``).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

LATEST = "latest"
PROGRESS = "progress.json"
DONE = "DONE"
OWNER = "owner.json"
# checkpoint_interval = "auto": the interval the daemon wants, rewritten when the pool's hazard
# or the job's save time moves it ({"seconds": ..., "job_id": ..., "attempt": ...}).
CHECKPOINT_INTERVAL = "checkpoint_interval.json"
EXITS = "exits"

ENV_JOB_ID = "SPOTWISE_JOB_ID"
ENV_ATTEMPT = "SPOTWISE_ATTEMPT"  # the attempt number, 1, 2, ...
ENV_CHECKPOINT_URI = "SPOTWISE_CHECKPOINT_URI"
ENV_CLOUD = "SPOTWISE_CLOUD"
# The job's checkpoint interval at launch, in seconds: the job file's checkpoint_interval,
# or for "auto" the first interval (then checkpoint_interval.json in the store).
ENV_CHECKPOINT_INTERVAL = "SPOTWISE_CHECKPOINT_INTERVAL"
# Gangs (nodes > 1): every node gets the gang's size, its own rank, one rendezvous id and
# node 0's address ("host:port"), so `python -m trainer --nnodes N` forms one process group.
ENV_NNODES = "SPOTWISE_NNODES"
ENV_NODE_RANK = "SPOTWISE_NODE_RANK"
ENV_RDZV_ENDPOINT = "SPOTWISE_RDZV_ENDPOINT"
ENV_RDZV_ID = "SPOTWISE_RDZV_ID"
# Set on an attempt placed while the previous one still saves its final checkpoint: seconds
# to wait at start until owner.json names this attempt, before touching the store.
ENV_CLAIM_WAIT = "SPOTWISE_CLAIM_WAIT"

# How to write each kind of store, for messages that list what is accepted.
ACCEPTED_FORMS = (
    "an absolute path, file:///path, s3://bucket/prefix, gs://bucket/prefix or "
    "az://container@account/prefix"
)
REMOTE_SCHEMES = ("s3", "gs", "az")
ENV_AZURE_ACCOUNT = "AZURE_STORAGE_ACCOUNT_NAME"

EXIT_PREEMPTED = 75  # "preempted, a durable checkpoint exists: start me again"
EXIT_FENCED = 76  # "another attempt owns the store now: this one must not continue"
# Written by the boot script, never by a job: the instance's GPU never appeared (no NVIDIA
# driver answered nvidia-smi in time), so the job did not start; place it again elsewhere.
EXIT_NO_GPU = 77
# The store was never handed to this attempt within $SPOTWISE_CLAIM_WAIT: it wrote nothing;
# the daemon counts the attempt as lost and places the job again.
EXIT_UNCLAIMED = 78


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed checkpoint URI: a local directory, or a bucket and key prefix."""

    scheme: str  # "file" (plain paths too), "s3", "gs" or "az"
    path: Path | None = None  # file
    bucket: str = ""  # s3 and gs: the bucket; az: the container
    prefix: str = ""  # remote stores: without leading or trailing "/"
    account: str = ""  # az: the storage account ("" until taken from the environment)

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    def key(self, name: str) -> str:
        """The object key of `name` under a remote store's prefix."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def url(self, name: str) -> str:
        """`name` under a remote store as one URI (``gs://bucket/prefix/name``)."""
        at = f"@{self.account}" if self.account else ""
        return f"{self.scheme}://{self.bucket}{at}/{self.key(name)}"

    def file(self, name: str) -> Path:
        assert self.path is not None, "file() is for local locations"
        return self.path / name


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$")
_AZ_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")
_AZ_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")


def parse_uri(uri: str, *, absolute: bool = False) -> Location:
    """``/path``, ``file:///path`` (percent-escapes decoded), ``s3://bucket/prefix``,
    ``gs://bucket/prefix`` or ``az://container[@account]/prefix``.

    With `absolute`, a relative path is refused: the daemon and a job resolve one against
    different folders, so the job would never find its checkpoints. Raises ValueError for
    anything else, with the forms that are accepted.
    """
    if not uri or not uri.strip():
        raise ValueError("the checkpoint URI is empty")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("s3", "gs"):
        if not parsed.netloc:
            raise ValueError(f"checkpoint URI {uri!r} has no bucket ({scheme}://BUCKET/prefix)")
        if scheme == "gs" and not _BUCKET.match(parsed.netloc):
            raise ValueError(f"checkpoint URI {uri!r}: {parsed.netloc!r} is not a bucket name")
        return Location(scheme, bucket=parsed.netloc, prefix=unquote(parsed.path).strip("/"))
    if scheme == "az":
        container, _, account = parsed.netloc.partition("@")
        account = account.split(".", 1)[0]  # container@account.blob.core.windows.net too
        if not _AZ_CONTAINER.match(container):
            raise ValueError(
                f"checkpoint URI {uri!r} has no valid container (az://CONTAINER@ACCOUNT/prefix)"
            )
        if account and not _AZ_ACCOUNT.match(account):
            raise ValueError(f"checkpoint URI {uri!r}: {account!r} is not a storage account")
        prefix = unquote(parsed.path).strip("/")
        return Location("az", bucket=container, prefix=prefix, account=account)
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"checkpoint URI {uri!r}: file:// URIs name no host")
        return Location("file", path=Path(unquote(parsed.path)))
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        path = Path(uri).expanduser()
        if absolute and not path.is_absolute():
            raise ValueError(
                f"checkpoint path {uri!r} is relative: the daemon and the job would resolve it "
                f"against different folders; use an absolute path such as "
                f"{str(Path('/') / 'srv' / uri.lstrip('./'))!r}"
            )
        return Location("file", path=path)
    raise ValueError(
        f"unsupported checkpoint URI scheme {parsed.scheme + '://'!r} in {uri!r} "
        f"(use {ACCEPTED_FORMS})"
    )


def canonical_uri(uri: str) -> str:
    """One spelling per store, so two jobs naming one store are seen to (``/x/y/`` and
    ``file:///x/y`` are one directory; ``gs://b/p/`` and ``gs://b/p`` one prefix). A URI
    that does not parse is returned as given."""
    try:
        loc = parse_uri(uri)
    except ValueError:
        return uri
    if loc.is_local:
        assert loc.path is not None
        if not loc.path.is_absolute():
            return uri
        return Path(os.path.normpath(loc.path)).as_uri()
    at = f"@{loc.account}" if loc.account else ""
    return f"{loc.scheme}://{loc.bucket}{at}/{loc.prefix}".rstrip("/")


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


def exit_doc(attempt: int, exit_code: int, job_id: str | None = None) -> str:
    doc: dict[str, Any] = {"attempt": attempt, "exit_code": exit_code, "at": utc_now()}
    if job_id:
        doc["job_id"] = job_id
    return json.dumps(doc) + "\n"


def done_doc(step: int, job_id: str | None, attempt: int | None) -> str:
    """DONE's content: the step training finished at, and who finished it."""
    doc: dict[str, Any] = {"step": step, "finished_at": utc_now()}
    if job_id:
        doc["job_id"] = job_id
    if attempt is not None:
        doc["attempt"] = attempt
    return json.dumps(doc) + "\n"


def written_by(text: str | None) -> str | None:
    """The job id a contract file names (DONE, progress.json, an exit record, owner.json),
    or None when it names none (a job's own code that writes an empty DONE, say)."""
    doc = parse_json(text)
    job = doc.get("job_id") if doc else None
    return job if isinstance(job, str) and job else None


def ours(text: str | None, job_id: str | None) -> bool:
    """A contract file that exists and was not written by another job: one naming no job
    counts (an older trainer's, or a job's own code), one naming another job does not."""
    if text is None:
        return False
    writer = written_by(text)
    return writer is None or job_id is None or writer == job_id


def my_job(env: dict[str, str] | None = None) -> str | None:
    """This process's job id from the environment (None outside the scheduler)."""
    return (env if env is not None else os.environ).get(ENV_JOB_ID) or None


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


def claim_wait(env: dict[str, str] | None = None) -> float | None:
    """Seconds to wait for owner.json to name this attempt ($SPOTWISE_CLAIM_WAIT), or None
    when the store is this attempt's from the start (unset or empty). Raises ValueError, one
    line naming the variable and its value, for anything else that is not a finite number
    > 0: starting at once would be the very race the wait prevents."""
    raw = (os.environ if env is None else env).get(ENV_CLAIM_WAIT, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{ENV_CLAIM_WAIT}: expected seconds > 0, got {raw!r}")
    return seconds


def fenced(owner_text: str | None, attempt: int | None, job_id: str | None = None) -> bool:
    """True when another job, or a newer attempt of this one, owns the store: this attempt
    must not write to it. Outside the scheduler (no attempt) nothing is fenced."""
    if attempt is None:
        return False
    owner_job = written_by(owner_text)
    if job_id and owner_job and owner_job != job_id:
        return True
    owner = owner_attempt(owner_text)
    return owner is not None and owner > attempt
