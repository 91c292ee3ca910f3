"""The scheduler's side of the checkpoint store: progress, completion, exit records, owner.

The trainer never imports the scheduler; the file layout in `trainer.contract` is the whole
interface. A read that fails (AccessDenied, expired credentials, a timeout) is never taken
for "absent": it raises StoreError, and the caller leaves the job as it is and says so.

A pass reads `progress.json` of every job it steps at once (`ProgressReader`): on a few
threads, with one deadline for the whole batch and outside every database transaction, so
a slow store holds neither a write lock nor the pass.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer import contract
from trainer.storage import LocalStore, file_version

# The S3-compatible endpoint of the checkpoint store (MinIO, R2, a test's moto); unset: AWS S3.
S3_ENDPOINT_ENV = "SPOTWISE_S3_ENDPOINT_URL"
# The standard variables naming a GCS emulator and an Azure Storage connection string.
GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
AZURE_CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
# Conditional writes of a claim retried after losing a race (another daemon, a trainer).
CLAIM_TRIES = 5


def _is_emulator(connection_string: str) -> bool:
    """A connection string of a loopback emulator (Azurite): the only kind that may travel
    to an instance; a real account's key never leaves the daemon's host."""
    lowered = connection_string.lower()
    return "blobendpoint=http://127." in lowered or "blobendpoint=http://localhost" in lowered


# The longest a pass waits for its progress.json reads. Progress feeds `status` and the
# deadline policy's estimate of the work left; a read that misses it is made again next pass,
# while a pass held by a slow store would hold the stops and launches behind it.
PROGRESS_READ_DEADLINE_S = 5.0
# Progress reads in flight at once: as many as the launch pass's store claims.
PROGRESS_READ_WORKERS = 8


@functools.lru_cache(maxsize=1024)
def _location(uri: str) -> contract.Location:
    """contract.parse_uri, remembered: a claim reads and then writes the same store, and a
    pass of thousands of launches would otherwise parse each URI twice over."""
    return contract.parse_uri(uri)


def is_local(uri: str) -> bool:
    """A local (file://, path) store; False for S3 and for a URI that does not parse (its
    claim fails and says why). Parsed through the claim's cache: one parse per URI."""
    try:
        return _location(uri).is_local
    except ValueError:
        return False


def _temp_file(directory: str, name: str) -> tuple[int, str]:
    """A new private temp file beside `name` (what tempfile.mkstemp makes, without drawing
    a random name per write): unique per process and thread, created exclusively."""
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), tmp
    except FileExistsError:  # left by a crash of a process with this pid: draw one
        import tempfile

        return tempfile.mkstemp(dir=directory, prefix=f".{name}.")


class StoreError(Exception):
    """The store could not be read or written; the message is safe to show."""


class CheckpointStores:
    """Reads and writes small contract files under any job's checkpoint URI.

    Local stores are plain files (the hot path of a pass that claims thousands). Remote
    stores (s3://, gs://, az://) go through the trainer's own store classes
    (`trainer.cloud_stores`), so both sides read and write one layout with one client each,
    and with each cloud's default credential chain."""

    def __init__(
        self,
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
        s3_endpoint_url: str | None = None,
    ) -> None:
        self._timeouts = (connect_timeout, read_timeout)
        self._endpoint = s3_endpoint_url or os.environ.get(S3_ENDPOINT_ENV) or None
        self._remote: dict[str, Any] = {}
        self._lock = threading.Lock()

    def instance_env(self, uri: str) -> dict[str, str]:
        """What a job's instance, on whichever cloud, needs to reach the store the daemon
        reads: the daemon's S3 endpoint for an s3:// URI (the trainer reads
        SPOTWISE_S3_ENDPOINT_URL, the boot script's `aws s3 cp` AWS_ENDPOINT_URL_S3), the
        GCS emulator for gs://, the storage account (and an emulator's connection string)
        for az://. Credentials are never passed: each instance brings its own identity;
        only an emulator's connection string, which exists on no real account, travels."""
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme == "s3" and self._endpoint is not None:
            return {S3_ENDPOINT_ENV: self._endpoint, "AWS_ENDPOINT_URL_S3": self._endpoint}
        out: dict[str, str] = {}
        if scheme == "gs" and os.environ.get(GCS_EMULATOR_ENV):
            out[GCS_EMULATOR_ENV] = os.environ[GCS_EMULATOR_ENV]
        if scheme == "az":
            for name in (contract.ENV_AZURE_ACCOUNT, AZURE_CONNECTION_ENV):
                value = os.environ.get(name)
                if value and (name != AZURE_CONNECTION_ENV or _is_emulator(value)):
                    out[name] = value
        return out

    def _store(self, uri: str) -> Any:
        """The trainer's store object for a remote URI, one per URI (its clients shared)."""
        with self._lock:
            store = self._remote.get(uri)
        if store is not None:
            return store
        from trainer import cloud_stores, storage

        if self._endpoint:
            os.environ.setdefault(S3_ENDPOINT_ENV, self._endpoint)
        connect, read = self._timeouts
        timeouts = cloud_stores.Timeouts(connect, read, tries=2)
        store = cloud_stores.open_remote(uri, storage.staging_for(_location(uri)), timeouts)
        with self._lock:
            return self._remote.setdefault(uri, store)

    def _remote_error(self, uri: str, name: str, e: Exception) -> StoreError:
        """A remote store's failure as one line, with no credential in it."""
        loc = _location(uri)
        code = ""
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
        return StoreError(f"{loc.url(name)}: {code or type(e).__name__}")

    def read(self, uri: str, name: str) -> str | None:
        """The file's text, None when it does not exist; StoreError when it cannot be read."""
        return self.read_versioned(uri, name)[0]

    def read_versioned(self, uri: str, name: str) -> tuple[str | None, str | None]:
        """(text, version) of a contract file; (None, None) when it does not exist."""
        try:
            loc = _location(uri)
        except ValueError as e:
            raise StoreError(str(e)) from None
        if loc.is_local:
            path = os.path.join(str(loc.path), name)  # what loc.file(name) names, cheaper
            try:
                version = file_version(Path(path))
                with open(path) as f:
                    return f.read(), version
            except FileNotFoundError:
                return None, None
            except (OSError, UnicodeDecodeError) as e:
                raise StoreError(f"cannot read {path}: {e}") from None
        try:
            return self._store(uri).read_versioned(name)
        except StoreError:
            raise
        except Exception as e:  # each SDK raises its own types
            raise self._remote_error(uri, name, e) from None

    def guard(self) -> None:
        """Called before every write: raises StoreError when this process may no longer
        write (FencedStores: the lease). Nothing here."""

    def write(self, uri: str, name: str, text: str, *, sync: bool = True) -> None:
        """Write atomically (temp file, rename). A local file is fsynced unless `sync` is
        False: then the caller makes many writes durable at once with `sync_local`."""
        self.guard()
        try:
            loc = _location(uri)
        except ValueError as e:
            raise StoreError(str(e)) from None
        if loc.is_local:
            target = os.path.join(str(loc.path), name)
            try:
                parent, base = os.path.split(target)
                os.makedirs(parent, exist_ok=True)
                fd, tmp = _temp_file(parent, base)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                    f.flush()
                    if sync:
                        os.fsync(f.fileno())
                os.replace(tmp, target)
            except OSError as e:
                raise StoreError(f"cannot write {target}: {e}") from None
            return
        try:
            self._store(uri).write_text(name, text)
        except Exception as e:
            raise self._remote_error(uri, name, e) from None

    def write_if(self, uri: str, name: str, text: str, version: str | None) -> str | None:
        """The store's conditional write (see trainer.storage.Store.write_if)."""
        self.guard()
        try:
            loc = _location(uri)
        except ValueError as e:
            raise StoreError(str(e)) from None
        try:
            if loc.is_local:
                assert loc.path is not None
                return LocalStore(loc.path).write_if(name, text, version)
            return self._store(uri).write_if(name, text, version)
        except OSError as e:
            where = name if loc.is_local else loc.url(name)
            raise StoreError(f"cannot write {where}: {e}") from None
        except Exception as e:
            raise self._remote_error(uri, name, e) from None

    # -- the contract ----------------------------------------------------------------------
    def progress(self, uri: str, job_id: str | None = None) -> dict[str, Any] | None:
        """progress.json, or None when absent or written by another job."""
        text = self.read(uri, contract.PROGRESS)
        if job_id is not None and text is not None and not contract.ours(text, job_id):
            return None
        return contract.parse_json(text)

    def done(self, uri: str, job_id: str | None = None) -> bool:
        """DONE written by this job. One that names another job is not this job's; one that
        names no job (a job's own code writing an empty file) counts while owner.json names
        this job, or names no job at all."""
        text = self.read(uri, contract.DONE)
        if text is None:
            return False
        writer = contract.written_by(text)
        if job_id is None or writer == job_id:
            return True
        if writer is not None:
            return False
        owner = contract.written_by(self.read(uri, contract.OWNER))
        return owner is None or owner == job_id

    def exit_code(self, uri: str, attempt: int, job_id: str | None = None) -> int | None:
        """The exit code attempt `attempt` of `job_id` recorded; a record naming another job
        is not this job's."""
        text = self.read(uri, contract.exit_name(attempt))
        if job_id is not None and text is not None and not contract.ours(text, job_id):
            return None
        doc = contract.parse_json(text)
        code = doc.get("exit_code") if doc else None
        return code if isinstance(code, int) and not isinstance(code, bool) else None

    def claim(
        self, uri: str, attempt: int, attempt_id: str, job_id: str, *, sync: bool = True
    ) -> None:
        """Record `attempt` of `job_id` as the store's owner before it is launched (the fence).

        The fence only moves forward: a later attempt of the same job already owning the
        store means this claim comes from a stale daemon (paused, then replaced), and moving
        `owner.json` back would let the old attempt's trainer overwrite the new one's
        checkpoints. Whether another job may use the store was decided in the database
        (`state.store_use`); here a store another job owned is claimed afresh.

        Taking the store from a previous owner (another attempt, another job) also rewrites
        `latest` unchanged: its version moves, so the previous owner's trainer, which writes
        `latest` only conditionally on the version it saw, can no longer advance it. Both
        writes are conditional, so two daemons racing on one store cannot both win. With
        `sync` False the caller makes many claims durable at once (`sync_local`)."""
        doc = contract.owner_doc(attempt, attempt_id, job_id)
        if self._claim_new(uri, doc, sync=sync):
            return
        for _ in range(CLAIM_TRIES):
            text, version = self.read_versioned(uri, contract.OWNER)
            current = contract.parse_json(text) or {}
            theirs = current.get("attempt")
            same_job = current.get("job_id") == job_id
            if same_job and isinstance(theirs, int) and theirs > attempt:
                raise StoreError(
                    f"{uri}: owned by attempt {theirs} of {job_id}; not moving it back to {attempt}"
                )
            previous = text is not None and not (same_job and theirs == attempt)
            if _location(uri).is_local and not previous:
                self.write(uri, contract.OWNER, doc, sync=sync)  # no one to fence out
                return
            if self.write_if(uri, contract.OWNER, doc, version) is not None:
                if previous:
                    self._move_latest(uri)
                return
        raise StoreError(f"{uri}: owner.json kept changing while it was claimed; not launching")

    def _move_latest(self, uri: str) -> None:
        """Rewrite `latest` unchanged (create it empty when absent): its version moves."""
        for _ in range(CLAIM_TRIES):
            text, version = self.read_versioned(uri, contract.LATEST)
            if self.write_if(uri, contract.LATEST, text or "", version) is not None:
                return
        raise StoreError(f"{uri}: latest kept changing while the store was claimed")

    def _claim_new(self, uri: str, doc: str, *, sync: bool) -> bool:
        """The first claim of a local store: when its directory does not exist, create it
        and write `owner.json` in it directly. No read (nothing can be there), no temp
        file and no rename: a 10,000-job pass makes 10,000 fewer lookups, renames and
        temp names. False, with nothing written, when the store exists or is not local:
        `claim` then reads the owner and replaces it atomically.

        As safe as the rename: every attempt is launched only after its claim, and the
        claim creates the directory, so no trainer of any attempt reads this owner.json
        yet; until this write completes it reads as no owner, as it would before the
        rename. A crash halfway leaves an empty directory or a short file, which
        `parse_json` takes for no owner: the next claim finds the directory and takes the
        general path. Durable: unless `sync` is False (the caller's `sync_local` then
        covers it before any cloud call), the file, its directory and the parent are
        fsynced here."""
        try:
            loc = _location(uri)
        except ValueError:
            return False  # the general path says why
        if not loc.is_local:
            return False
        self.guard()  # before the mkdir: a stale daemon creates nothing
        directory = str(loc.path)
        target = os.path.join(directory, contract.OWNER)
        try:
            try:
                os.mkdir(directory)
            except FileNotFoundError:  # the stores' root: made once
                os.makedirs(os.path.dirname(directory), exist_ok=True)
                os.mkdir(directory)
        except FileExistsError:
            return False
        except OSError as e:
            raise StoreError(f"cannot write {target}: {e}") from None
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                data = doc.encode()
                while data:
                    data = data[os.write(fd, data) :]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if sync:
                for d in (directory, os.path.dirname(directory) or os.curdir):
                    dfd = os.open(d, os.O_RDONLY)
                    try:
                        os.fsync(dfd)
                    finally:
                        os.close(dfd)
        except OSError as e:
            raise StoreError(f"cannot write {target}: {e}") from None
        return True

    @staticmethod
    def sync_local() -> None:
        """Make every local write so far durable, renames included: one sync(2) after a
        pass's hundreds of claims instead of an fsync each (S3 writes are durable already)."""
        import os

        os.sync()


@dataclass
class ProgressReads:
    """What one batch of progress.json reads returned, by job id: the parsed document (None
    when the file does not exist), or the error its read raised (StoreError when the store
    could not be read or did not answer before the deadline)."""

    values: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    errors: dict[str, Exception] = field(default_factory=dict)

    def progress(self, job_id: str) -> dict[str, Any] | None:
        """The job's progress as its read returned it, raising what its read raised; None for
        a job the batch did not read."""
        error = self.errors.get(job_id)
        if error is not None:
            raise error
        return self.values.get(job_id)


class ProgressReader:
    """Reads progress.json of many jobs at once, on a small pool of threads kept for the
    daemon's life (a read that hangs past the deadline holds one thread, never a new one
    per pass). Each thread takes the next job from the batch until none is left, so a
    batch of thousands costs a few thread handoffs, not one per read. The batch waits at
    most `deadline` seconds: a read still running then is reported as a StoreError and
    its late answer is dropped; no job waiting behind it is started."""

    def __init__(
        self,
        stores: CheckpointStores,
        deadline: float = PROGRESS_READ_DEADLINE_S,
        workers: int = PROGRESS_READ_WORKERS,
    ) -> None:
        self.stores = stores
        self.deadline = deadline
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="progress")
            return self._pool

    def read(self, uris: Mapping[str, str]) -> ProgressReads:
        """progress.json under each job's checkpoint URI (job id -> URI), read concurrently."""
        if not uris:
            return ProgressReads()
        todo = iter(list(uris.items()))
        found = ProgressReads()
        lock = threading.Lock()
        over = threading.Event()

        def work() -> None:
            while not over.is_set():
                with lock:
                    item = next(todo, None)
                if item is None:
                    return
                job_id, uri = item
                try:
                    value = self.stores.progress(uri, job_id)
                except Exception as e:  # StoreError, a document we cannot parse, a bug
                    with lock:
                        found.errors[job_id] = e
                else:
                    with lock:
                        found.values[job_id] = value

        pool = self._threads()
        threads = [pool.submit(work) for _ in range(min(self.workers, len(uris)))]
        _, late = wait(threads, timeout=self.deadline)
        over.set()
        for t in late:
            t.cancel()  # still queued behind reads that hang: never start it
        with lock:  # what arrived by now; a read that ends later writes to `found` unseen
            out = ProgressReads(dict(found.values), dict(found.errors))
        for job_id in uris:
            if job_id not in out.values and job_id not in out.errors:
                out.errors[job_id] = StoreError(
                    f"progress.json: no answer within {self.deadline:g}s"
                )
        return out
