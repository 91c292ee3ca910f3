"""Reads the trainer's progress contract (progress.json, DONE) from a checkpoint URI.

The scheduler never imports the trainer: this file format is the whole interface.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


def local_path(uri: str) -> Path | None:
    """The filesystem path of a file:// URI or a plain path; None for object stores."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "":
        return Path(uri)
    return None


def _read(uri: str, name: str) -> bytes | None:
    path = local_path(uri)
    if path is not None:
        try:
            return (path / name).read_bytes()
        except OSError:
            return None
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        from botocore.exceptions import BotoCoreError, ClientError

        key = f"{parsed.path.lstrip('/').rstrip('/')}/{name}".lstrip("/")
        try:
            obj = _s3().get_object(Bucket=parsed.netloc, Key=key)
            return obj["Body"].read()
        except (BotoCoreError, ClientError):
            return None
    return None


@lru_cache(maxsize=1)
def _s3() -> Any:
    """One client for every poll (boto3 honours AWS_ENDPOINT_URL and the credential chain)."""
    import boto3

    return boto3.client("s3")


def read_progress(uri: str) -> dict[str, Any] | None:
    raw = _read(uri, "progress.json")
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None  # being rewritten; next poll will see it
    return data if isinstance(data, dict) else None


def is_done(uri: str) -> bool:
    return _read(uri, "DONE") is not None
