"""Checkpoint stores: a local directory (plain path or file://) or an s3:// prefix.

The instance's disk vanishes with the instance, so for s3 a checkpoint is saved to a local
staging directory first, uploaded, and only then does ``latest`` move (written last).
Small files (``latest``, ``progress.json``, ``DONE``) are replaced atomically: a temp file,
fsync, rename (locally) or a single PUT (s3, where a PUT is atomic).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path

from trainer import contract

STEP_RE = re.compile(r"^step-(\d+)$")
METADATA = ".metadata"
"""DCP's index file, written last by the coordinator: a step dir without it is incomplete."""


class Store(ABC):
    """Where checkpoints and the progress contract files live."""

    uri: str

    @property
    def is_local(self) -> bool:
        return False

    @abstractmethod
    def read_text(self, name: str) -> str | None:
        """Contents of ``<uri>/<name>``, or None when absent."""

    @abstractmethod
    def write_text(self, name: str, text: str) -> None:
        """Atomically create or replace ``<uri>/<name>``."""

    @abstractmethod
    def step_dirs(self) -> dict[int, bool]:
        """Step number -> complete (has DCP .metadata), for every ``step-<N>`` present."""

    @abstractmethod
    def delete_step(self, step: int) -> None: ...

    @abstractmethod
    def local_dir(self, step: int) -> Path:
        """Local directory DCP writes/reads ``step-<N>`` in (the store itself, or staging)."""

    def upload(self, step: int, files: list[Path]) -> None:  # noqa: B027 (optional hook)
        """Make the given files of a locally saved step durable in the store (no-op locally)."""

    def download(self, step: int) -> Path:
        """Bring ``step-<N>`` to local disk for DCP to read; return its local directory."""
        return self.local_dir(step)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(Store):
    """A directory on a (possibly shared) file system."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)
        root.mkdir(parents=True, exist_ok=True)

    @property
    def is_local(self) -> bool:
        return True

    def read_text(self, name: str) -> str | None:
        try:
            return (self.root / name).read_text()
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        target = self.root / name  # name may hold a folder: exits/<N>.json
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)

    def step_dirs(self) -> dict[int, bool]:
        out: dict[int, bool] = {}
        for p in self.root.iterdir():
            m = STEP_RE.match(p.name)
            if m and p.is_dir():
                out[int(m.group(1))] = (p / METADATA).is_file()
        return out

    def delete_step(self, step: int) -> None:
        shutil.rmtree(self.root / f"step-{step}", ignore_errors=True)

    def local_dir(self, step: int) -> Path:
        return self.root / f"step-{step}"


class S3Store(Store):
    """``s3://bucket/prefix``; endpoint from $SPOTWISE_S3_ENDPOINT_URL or $AWS_ENDPOINT_URL."""

    def __init__(self, uri: str, staging: Path) -> None:
        import boto3  # lazy: only s3 users need it

        loc = contract.parse_uri(uri)
        self.location = loc
        self.uri = uri.rstrip("/")
        self.bucket = loc.bucket
        self.prefix = loc.prefix
        self.staging = staging
        endpoint = os.environ.get("SPOTWISE_S3_ENDPOINT_URL") or None
        self.s3 = boto3.client("s3", endpoint_url=endpoint)

    def _key(self, name: str) -> str:
        return self.location.key(name)

    def read_text(self, name: str) -> str | None:
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=self._key(name))
        except self.s3.exceptions.NoSuchKey:
            return None
        return obj["Body"].read().decode()

    def write_text(self, name: str, text: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=self._key(name), Body=text.encode())

    def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(prefix)
        ):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def step_dirs(self) -> dict[int, bool]:
        out: dict[int, bool] = {}
        base = len(self._key(""))
        for key in self._list("step-"):
            folder, _, fname = key[base:].partition("/")
            m = STEP_RE.match(folder)
            if m:
                step = int(m.group(1))
                out[step] = out.get(step, False) or fname == METADATA
        return out

    def delete_step(self, step: int) -> None:
        keys = self._list(f"step-{step}/")
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})
        shutil.rmtree(self.local_dir(step), ignore_errors=True)

    def local_dir(self, step: int) -> Path:
        return self.staging / f"step-{step}"

    def upload(self, step: int, files: list[Path]) -> None:
        for path in files:
            self.s3.upload_file(str(path), self.bucket, self._key(f"step-{step}/{path.name}"))

    def download(self, step: int) -> Path:
        target = self.local_dir(step)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for key in self._list(f"step-{step}/"):
            self.s3.download_file(self.bucket, key, str(target / key.rsplit("/", 1)[1]))
        return target


def open_store(uri: str, staging_dir: str = "") -> Store:
    """The store for a URI, parsed by ``contract.parse_uri`` (the scheduler's parser too).

    Raises ValueError (with the accepted forms) for an unsupported or malformed URI.
    """
    loc = contract.parse_uri(uri)
    if loc.is_local:
        assert loc.path is not None
        return LocalStore(loc.path)
    staging = Path(staging_dir) if staging_dir else Path(tempfile.gettempdir())
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{loc.bucket}/{loc.prefix}")
    staging = staging / "spotwise-staging" / safe
    staging.mkdir(parents=True, exist_ok=True)
    return S3Store(uri, staging)
