"""The object-store checkpoint stores: S3 (boto3), Google Cloud Storage and Azure Blob Storage
(fsspec's gcsfs and adlfs, the layer torch's DCP itself can write through).

Each uses its cloud's default credential chain and never a key of ours: boto3's chain (an
instance profile on EC2), Application Default Credentials (a GCE service account), and
``DefaultAzureCredential`` (a VM's managed identity), or ``$AZURE_STORAGE_CONNECTION_STRING``
where one is set (Azurite, the emulator the tests start). Emulators are found through the
standard variables: ``$STORAGE_EMULATOR_HOST`` for GCS, the connection string for Azure,
``$SPOTWISE_S3_ENDPOINT_URL`` (or ``$AWS_ENDPOINT_URL_S3``) for an S3-compatible server.

S3 stays on boto3 rather than s3fs: s3fs needs aiobotocore, whose pins on botocore exclude
the boto3 the AWS adapter uses, and boto3 already does everything the contract needs
(conditional PUTs included). Conditional writes: S3 ``If-Match``/``If-None-Match: *``, GCS
``ifGenerationMatch`` (0: only if absent), Azure ``If-Match``/``If-None-Match: *`` (ETags).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

from trainer import contract
from trainer.storage import RemoteStore, StoreUnavailable

S3_ENDPOINT_ENV = "SPOTWISE_S3_ENDPOINT_URL"
GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
AZURE_CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
# Seconds one request to a store may take before it counts as failed (the trainer's: a
# checkpoint shard is large). The daemon passes shorter ones (`Timeouts`): a pass must not
# wait a minute on one store.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0


class Timeouts:
    """Connect and read timeouts, in seconds, and how many tries a request gets."""

    def __init__(
        self, connect: float = CONNECT_TIMEOUT_S, read: float = READ_TIMEOUT_S, tries: int = 3
    ) -> None:
        self.connect, self.read, self.tries = connect, read, tries

    def key(self) -> str:
        return f"{self.connect}/{self.read}/{self.tries}"


TRAINER = Timeouts()

_lock = threading.Lock()
_clients: dict[tuple[str, str], Any] = {}


def _shared(kind: str, key: str, make: Any) -> Any:
    """One client per store kind and account for the whole process (threads share it)."""
    with _lock:
        client = _clients.get((kind, key))
        if client is None:
            client = _clients[(kind, key)] = make()
        return client


# --------------------------------------------------------------------------------- S3
class S3Store(RemoteStore):
    """``s3://bucket/prefix``; endpoint from $SPOTWISE_S3_ENDPOINT_URL or $AWS_ENDPOINT_URL_S3."""

    def __init__(self, uri: str, staging: Path, timeouts: Timeouts = TRAINER) -> None:
        super().__init__(uri, staging)
        self.bucket = self.location.bucket
        endpoint = os.environ.get(S3_ENDPOINT_ENV) or os.environ.get("AWS_ENDPOINT_URL_S3")

        def make() -> Any:
            import boto3  # lazy: only s3 users need it
            from botocore.config import Config

            return boto3.client(
                "s3",
                endpoint_url=endpoint or None,
                config=Config(
                    connect_timeout=timeouts.connect,
                    read_timeout=timeouts.read,
                    retries={"mode": "standard", "total_max_attempts": timeouts.tries},
                ),
            )

        self.s3 = _shared("s3", f"{endpoint or ''}|{timeouts.key()}", make)

    def get_object(self, key: str) -> tuple[bytes | None, str | None]:
        from botocore.exceptions import ClientError

        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise
        return obj["Body"].read(), obj.get("ETag")

    def put_object(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def put_object_if(self, key: str, data: bytes, version: str | None) -> str | None:
        from botocore.exceptions import ClientError

        cond = {"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}
        try:
            out = self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, **cond)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            # 412: the version moved; 409: a concurrent conditional write won; NoSuchKey:
            # If-Match on an object deleted since.
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return None
            raise
        return out.get("ETag") or ""

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})

    def upload_file(self, path: Path, key: str) -> None:
        self.s3.upload_file(str(path), self.bucket, key)

    def download_file(self, key: str, path: Path) -> None:
        self.s3.download_file(self.bucket, key, str(path))


# -------------------------------------------------------------------------------- GCS
def gcs_filesystem(timeouts: Timeouts = TRAINER) -> Any:
    """gcsfs over the JSON API (never its gRPC probe of the bucket type, which an emulator
    does not serve); Application Default Credentials, or none against an emulator."""

    def make() -> Any:
        from gcsfs.core import GCSFileSystem

        token = "anon" if os.environ.get(GCS_EMULATOR_ENV) else None
        return GCSFileSystem(
            token=token,
            cache_timeout=0,  # a version read from a cached listing would be stale
            requests_timeout=timeouts.read,
            skip_instance_cache=True,
        )

    return _shared("gs", f"{os.environ.get(GCS_EMULATOR_ENV, '')}|{timeouts.key()}", make)


class GcsStore(RemoteStore):
    """``gs://bucket/prefix``: versions are object generations."""

    def __init__(self, uri: str, staging: Path, timeouts: Timeouts = TRAINER) -> None:
        super().__init__(uri, staging)
        self.bucket = self.location.bucket
        self.fs = gcs_filesystem(timeouts)

    def _path(self, key: str) -> str:
        return f"{self.bucket}/{key}"

    def get_object(self, key: str) -> tuple[bytes | None, str | None]:
        # One request: the content and the generation it has (x-goog-generation).
        url = f"{self.fs._location}/download/storage/v1/b/{quote(self.bucket, safe='')}/o/"
        try:
            headers, data = self.fs.call("GET", url + quote(key, safe=""), alt="media")
        except FileNotFoundError:
            return None, None
        return bytes(data), headers.get("x-goog-generation") or headers.get("X-Goog-Generation")

    def put_object(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(key), data)

    def put_object_if(self, key: str, data: bytes, version: str | None) -> str | None:
        meta = _json_str({"name": key})
        body = (
            b"--==0==\nContent-Type: application/json; charset=UTF-8\n\n"
            + meta.encode()
            + b"\n--==0==\nContent-Type: application/octet-stream\n\n"
            + data
            + b"\n--==0==--"
        )
        url = f"{self.fs._location}/upload/storage/v1/b/{quote(self.bucket, safe='')}/o"
        try:
            out = self.fs.call(
                "POST",
                url,
                uploadType="multipart",
                ifGenerationMatch=version if version is not None else "0",
                headers={"Content-Type": 'multipart/related; boundary="==0=="'},
                data=body,
                json_out=True,
            )
        except (FileExistsError, FileNotFoundError):  # gcsfs raises 412 as FileExistsError
            return None
        return str(out.get("generation") or "")

    def list_keys(self, prefix: str) -> list[str]:
        # objects.list by prefix (a prefix such as "run/step-" is no directory to fsspec)
        url = f"{self.fs._location}/storage/v1/b/{quote(self.bucket, safe='')}/o"
        keys: list[str] = []
        token: str | None = None
        while True:
            page = self.fs.call(
                "GET",
                url,
                prefix=prefix,
                pageToken=token,
                fields="items(name),nextPageToken",
                json_out=True,
            )
            keys.extend(item["name"] for item in page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                return keys

    def delete_keys(self, keys: list[str]) -> None:
        if keys:
            self.fs.rm([self._path(k) for k in keys])

    def upload_file(self, path: Path, key: str) -> None:
        self.fs.put_file(str(path), self._path(key))

    def download_file(self, key: str, path: Path) -> None:
        self.fs.get_file(self._path(key), str(path))


def _json_str(value: object) -> str:
    import json

    return json.dumps(value)


# ------------------------------------------------------------------------------ Azure
def azure_account(loc: contract.Location) -> str:
    """The storage account of an az:// store: named in the URI, else the environment's."""
    account = loc.account or os.environ.get(contract.ENV_AZURE_ACCOUNT, "")
    if not account:
        conn = _connection_string_fields()
        account = conn.get("accountname", "")
    if not account:
        raise StoreUnavailable(
            f"{loc.url('')}: no storage account; write az://{loc.bucket}@ACCOUNT/... or set "
            f"{contract.ENV_AZURE_ACCOUNT}"
        )
    return account


def _connection_string_fields() -> dict[str, str]:
    raw = os.environ.get(AZURE_CONNECTION_ENV, "")
    fields = (part.partition("=") for part in raw.split(";") if "=" in part)
    return {k.strip().lower(): v for k, _, v in fields}


def azure_filesystem(account: str, timeouts: Timeouts = TRAINER) -> Any:
    """adlfs for `account`: the connection string when it names that account (Azurite),
    else DefaultAzureCredential (a managed identity, the CLI's login, workload identity)."""

    def make() -> Any:
        from adlfs import AzureBlobFileSystem

        common = {
            "skip_instance_cache": True,
            "timeout": int(timeouts.read),
            "connection_timeout": int(timeouts.connect),
            "read_timeout": int(timeouts.read),
        }
        if _connection_string_fields().get("accountname") == account:
            return AzureBlobFileSystem(connection_string=os.environ[AZURE_CONNECTION_ENV], **common)
        from azure.identity.aio import DefaultAzureCredential

        return AzureBlobFileSystem(
            account_name=account, credential=DefaultAzureCredential(), anon=False, **common
        )

    key = f"{account}|{os.environ.get(AZURE_CONNECTION_ENV, '')}|{timeouts.key()}"
    return _shared("az", key, make)


class AzureStore(RemoteStore):
    """``az://container@account/prefix``: versions are blob ETags."""

    def __init__(self, uri: str, staging: Path, timeouts: Timeouts = TRAINER) -> None:
        super().__init__(uri, staging)
        self.container = self.location.bucket
        self.fs = azure_filesystem(azure_account(self.location), timeouts)

    def _path(self, key: str) -> str:
        return f"{self.container}/{key}"

    def _run(self, coro_fn: Any, *args: Any, **kwargs: Any) -> Any:
        from fsspec.asyn import sync

        return sync(self.fs.loop, coro_fn, *args, **kwargs)

    def get_object(self, key: str) -> tuple[bytes | None, str | None]:
        from azure.core.exceptions import ResourceNotFoundError

        async def get() -> tuple[bytes, str]:
            async with self.fs.service_client.get_blob_client(self.container, key) as blob:
                stream = await blob.download_blob()  # the content and its ETag, at once
                return await stream.readall(), stream.properties.etag

        try:
            return self._run(get)
        except ResourceNotFoundError:
            return None, None

    def put_object(self, key: str, data: bytes) -> None:
        async def put() -> None:
            async with self.fs.service_client.get_blob_client(self.container, key) as blob:
                await blob.upload_blob(data, overwrite=True)

        self._run(put)

    def put_object_if(self, key: str, data: bytes, version: str | None) -> str | None:
        from azure.core import MatchConditions
        from azure.core.exceptions import (
            ResourceExistsError,
            ResourceModifiedError,
            ResourceNotFoundError,
        )

        async def put() -> str:
            async with self.fs.service_client.get_blob_client(self.container, key) as blob:
                if version is None:
                    out = await blob.upload_blob(data, overwrite=False)
                else:
                    out = await blob.upload_blob(
                        data,
                        overwrite=True,
                        etag=version,
                        match_condition=MatchConditions.IfNotModified,
                    )
                return str(out.get("etag") or "")

        try:
            return self._run(put)
        except (ResourceExistsError, ResourceModifiedError, ResourceNotFoundError):
            return None

    def list_keys(self, prefix: str) -> list[str]:
        async def names() -> list[str]:
            container = self.fs.service_client.get_container_client(self.container)
            async with container:
                return [b.name async for b in container.list_blobs(name_starts_with=prefix)]

        return self._run(names)

    def delete_keys(self, keys: list[str]) -> None:
        if not keys:
            return

        async def delete() -> None:
            import asyncio

            from azure.core.exceptions import ResourceNotFoundError

            container = self.fs.service_client.get_container_client(self.container)
            async with container:
                for i in range(0, len(keys), 64):
                    done = await asyncio.gather(
                        *(container.delete_blob(k) for k in keys[i : i + 64]),
                        return_exceptions=True,
                    )
                    for out in done:
                        if isinstance(out, BaseException) and not isinstance(
                            out, ResourceNotFoundError
                        ):
                            raise out

        self._run(delete)

    def upload_file(self, path: Path, key: str) -> None:
        self.fs.put_file(str(path), self._path(key), overwrite=True)

    def download_file(self, key: str, path: Path) -> None:
        self.fs.get_file(self._path(key), str(path))


def open_remote(uri: str, staging: Path, timeouts: Timeouts = TRAINER) -> RemoteStore:
    """The store of a remote URI (s3://, gs://, az://)."""
    scheme = contract.parse_uri(uri).scheme
    if scheme == "s3":
        return S3Store(uri, staging, timeouts)
    if scheme == "gs":
        return GcsStore(uri, staging, timeouts)
    if scheme == "az":
        return AzureStore(uri, staging, timeouts)
    raise ValueError(f"not a remote store: {uri!r}")
