"""The scheduler's side of the checkpoint store: progress, completion, exit records, owner.

The trainer never imports the scheduler; the file layout in `trainer.contract` is the whole
interface. A read that fails (AccessDenied, expired credentials, a timeout) is never taken
for "absent": it raises StoreError, and the caller leaves the job as it is and says so.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from trainer import contract

# The S3-compatible endpoint of the checkpoint store (MinIO, R2, a test's moto); unset: AWS S3.
S3_ENDPOINT_ENV = "SPOTWISE_S3_ENDPOINT_URL"


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
    """Reads and writes small contract files under any job's checkpoint URI."""

    def __init__(
        self,
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
        s3_endpoint_url: str | None = None,
    ) -> None:
        self._timeouts = (connect_timeout, read_timeout)
        self._endpoint = s3_endpoint_url or os.environ.get(S3_ENDPOINT_ENV) or None
        self._s3: Any = None
        self._lock = threading.Lock()

    def instance_env(self, uri: str) -> dict[str, str]:
        """What a job's instance, on whichever cloud, needs to reach the store the daemon
        reads: the daemon's S3 endpoint for an s3:// URI (the trainer reads
        SPOTWISE_S3_ENDPOINT_URL, the boot script's `aws s3 cp` AWS_ENDPOINT_URL_S3).
        Credentials are never passed: each instance brings its own."""
        if self._endpoint is None or not uri.startswith("s3://"):
            return {}
        return {S3_ENDPOINT_ENV: self._endpoint, "AWS_ENDPOINT_URL_S3": self._endpoint}

    def _client(self) -> Any:
        with self._lock:
            if self._s3 is None:
                import boto3
                from botocore.config import Config

                self._s3 = boto3.client(
                    "s3",
                    endpoint_url=self._endpoint,
                    config=Config(
                        connect_timeout=self._timeouts[0],
                        read_timeout=self._timeouts[1],
                        retries={"mode": "standard", "total_max_attempts": 2},
                    ),
                )
            return self._s3

    def read(self, uri: str, name: str) -> str | None:
        """The file's text, None when it does not exist; StoreError when it cannot be read."""
        try:
            loc = _location(uri)
        except ValueError as e:
            raise StoreError(str(e)) from None
        if loc.is_local:
            path = os.path.join(str(loc.path), name)  # what loc.file(name) names, cheaper
            try:
                with open(path) as f:
                    return f.read()
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as e:
                raise StoreError(f"cannot read {path}: {e}") from None
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            obj = self._client().get_object(Bucket=loc.bucket, Key=loc.key(name))
            return obj["Body"].read().decode("utf-8", errors="replace")
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            raise StoreError(f"s3://{loc.bucket}/{loc.key(name)}: {code or 'error'}") from None
        except BotoCoreError as e:
            raise StoreError(f"s3://{loc.bucket}/{loc.key(name)}: {type(e).__name__}") from None

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
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client().put_object(Bucket=loc.bucket, Key=loc.key(name), Body=text.encode())
        except (BotoCoreError, ClientError) as e:
            raise StoreError(f"s3://{loc.bucket}/{loc.key(name)}: {type(e).__name__}") from None

    # -- the contract ----------------------------------------------------------------------
    def progress(self, uri: str) -> dict[str, Any] | None:
        return contract.parse_json(self.read(uri, contract.PROGRESS))

    def done(self, uri: str) -> bool:
        return self.read(uri, contract.DONE) is not None

    def exit_code(self, uri: str, attempt: int) -> int | None:
        doc = contract.parse_json(self.read(uri, contract.exit_name(attempt)))
        code = doc.get("exit_code") if doc else None
        return code if isinstance(code, int) and not isinstance(code, bool) else None

    def claim(
        self, uri: str, attempt: int, attempt_id: str, job_id: str, *, sync: bool = True
    ) -> None:
        """Record `attempt` as the store's owner before it is launched (the fence).

        The fence only moves forward: a later attempt of the same job already owning the
        store means this claim comes from a stale daemon (paused, then replaced), and moving
        `owner.json` back would let the old attempt's trainer overwrite the new one's
        checkpoints. A store reused by another job is claimed afresh. With `sync` False the
        caller makes many claims durable at once (`sync_local`).
        """
        doc = contract.owner_doc(attempt, attempt_id, job_id)
        if self._claim_new(uri, doc, sync=sync):
            return
        current = contract.parse_json(self.read(uri, contract.OWNER)) or {}
        theirs = current.get("attempt")
        if current.get("job_id") == job_id and isinstance(theirs, int) and theirs > attempt:
            raise StoreError(
                f"{uri}: owned by attempt {theirs} of {job_id}; not moving it back to {attempt}"
            )
        self.write(uri, contract.OWNER, doc, sync=sync)

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
