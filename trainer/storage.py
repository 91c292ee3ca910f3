"""Checkpoint stores: a local directory (a path or file://), or an s3://, gs:// or az:// prefix.

The instance's disk vanishes with the instance, so for a remote store a checkpoint is saved
to a local staging directory first, uploaded, and only then does ``latest`` move (written
last). Small files (``latest``, ``progress.json``, ``DONE``) are replaced atomically: a temp
file, fsync, rename (locally) or a single PUT (an object store, where a PUT is atomic).

``latest`` and ``owner.json`` are also written conditionally (``write_if``): against the
version the writer last read, so of two writers racing only one succeeds. Each store uses
its own conditional write: S3 ``If-Match``/``If-None-Match``, GCS generation preconditions,
Azure ETags, and locally a lock file held while the version is compared and the file
replaced. The cloud stores themselves are in ``trainer.cloud_stores``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from trainer import contract

STEP_RE = re.compile(r"^step-(\d+)$")
METADATA = ".metadata"
"""DCP's index file, written last by the coordinator: a step dir without it is incomplete."""
LOCK = ".lock"
"""A local store's lock file: held while a conditional write compares and replaces."""


class StoreUnavailable(Exception):
    """A store could not be read or written (credentials, network, permissions)."""


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
    def read_versioned(self, name: str) -> tuple[str | None, str | None]:
        """``(text, version)`` of ``<uri>/<name>``; ``(None, None)`` when it is absent. The
        version may be older than the text, never newer: a ``write_if`` against it then
        fails and the caller reads again."""

    @abstractmethod
    def write_if(self, name: str, text: str, version: str | None) -> str | None:
        """Replace ``<uri>/<name>`` only if its version is still `version` (None: only if
        it does not exist). Returns the new version, or None when the condition failed."""

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


def atomic_write(target: Path, text: str) -> None:
    """Write `text` to `target` through a temp file, fsync and rename."""
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


def file_version(path: Path) -> str | None:
    """A local file's version: inode, change time and size (a rename makes a new inode)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


@contextlib.contextmanager
def locked(root: Path, shared: bool = False) -> Iterator[None]:
    """Hold the store's lock file (flock: every process on this host, NFS with lockd)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


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
        atomic_write(self.root / name, text)  # name may hold a folder: exits/<N>.json

    def read_versioned(self, name: str) -> tuple[str | None, str | None]:
        with locked(self.root, shared=True):
            version = file_version(self.root / name)
            return self.read_text(name), version

    def write_if(self, name: str, text: str, version: str | None) -> str | None:
        target = self.root / name
        with locked(self.root):
            if file_version(target) != version:
                return None
            atomic_write(target, text)
            return file_version(target)

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


class RemoteStore(Store):
    """An object-store prefix: steps staged on local disk, small files as single objects.

    Subclasses supply the object primitives; keys are full keys under the bucket."""

    def __init__(self, uri: str, staging: Path) -> None:
        self.location = contract.parse_uri(uri)
        self.uri = uri.rstrip("/")
        self.staging = staging

    def _key(self, name: str) -> str:
        return self.location.key(name)

    # -- the object primitives -----------------------------------------------------------
    @abstractmethod
    def get_object(self, key: str) -> tuple[bytes | None, str | None]:
        """``(data, version)``, ``(None, None)`` when the object does not exist."""

    @abstractmethod
    def put_object(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def put_object_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """The conditional PUT: the new version, or None when the condition failed."""

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]: ...

    @abstractmethod
    def delete_keys(self, keys: list[str]) -> None: ...

    @abstractmethod
    def upload_file(self, path: Path, key: str) -> None: ...

    @abstractmethod
    def download_file(self, key: str, path: Path) -> None: ...

    # -- the store -----------------------------------------------------------------------
    def read_text(self, name: str) -> str | None:
        data, _ = self.get_object(self._key(name))
        return None if data is None else data.decode("utf-8", errors="replace")

    def write_text(self, name: str, text: str) -> None:
        self.put_object(self._key(name), text.encode())

    def read_versioned(self, name: str) -> tuple[str | None, str | None]:
        data, version = self.get_object(self._key(name))
        return (None if data is None else data.decode("utf-8", errors="replace")), version

    def write_if(self, name: str, text: str, version: str | None) -> str | None:
        return self.put_object_if(self._key(name), text.encode(), version)

    def step_dirs(self) -> dict[int, bool]:
        out: dict[int, bool] = {}
        base = len(self._key(""))
        for key in self.list_keys(self._key("step-")):
            folder, _, fname = key[base:].partition("/")
            m = STEP_RE.match(folder)
            if m:
                step = int(m.group(1))
                out[step] = out.get(step, False) or fname == METADATA
        return out

    def delete_step(self, step: int) -> None:
        self.delete_keys(self.list_keys(self._key(f"step-{step}/")))
        shutil.rmtree(self.local_dir(step), ignore_errors=True)

    def local_dir(self, step: int) -> Path:
        return self.staging / f"step-{step}"

    def upload(self, step: int, files: list[Path]) -> None:
        for path in files:
            self.upload_file(path, self._key(f"step-{step}/{path.name}"))

    def download(self, step: int) -> Path:
        target = self.local_dir(step)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for key in self.list_keys(self._key(f"step-{step}/")):
            self.download_file(key, target / key.rsplit("/", 1)[1])
        return target


def staging_for(loc: contract.Location, staging_dir: str = "") -> Path:
    """The local staging directory of a remote store (one per bucket and prefix)."""
    staging = Path(staging_dir) if staging_dir else Path(tempfile.gettempdir())
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{loc.scheme}/{loc.bucket}/{loc.prefix}")
    staging = staging / "spotwise-staging" / safe
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def open_store(uri: str, staging_dir: str = "") -> Store:
    """The store for a URI, parsed by ``contract.parse_uri`` (the scheduler's parser too).

    Raises ValueError (with the accepted forms) for an unsupported or malformed URI.
    """
    loc = contract.parse_uri(uri)
    if loc.is_local:
        assert loc.path is not None
        return LocalStore(loc.path)
    from trainer import cloud_stores  # the cloud SDKs load only for a remote store

    return cloud_stores.open_remote(uri, staging_for(loc, staging_dir))
