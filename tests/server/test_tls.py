"""The server on its own certificate: `spotwise server --tls-cert --tls-key` answers HTTPS
only, the CLI reaches it through `SPOTWISE_CA_CERT` (a private CA) and refuses it without,
and a certificate without its key, a file that is not one or a key of another certificate
is one line and exit 2, before the server says it listens."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.api_server import free_port, token_for
from tests.support.cli_run import env, spotwise
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_the_server_on_its_own_certificate(tmp_path: Path) -> None:
    world = make_ops_world(tmp_path)
    cert, key = _self_signed(tmp_path)
    token = token_for(world.engine, "ops", "admin", ("research", "vision"))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "server", "-c", str(world.config),
             "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key)],
            stdout=out, stderr=subprocess.STDOUT, env=env(), cwd=tmp_path,
        )  # fmt: skip
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5, context=trusted) as r:
                    assert json.loads(r.read())["status"] == "ok"
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
        with pytest.raises(OSError):  # plain HTTP on the TLS port gets no answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
        remote = {"SPOTWISE_API": url, "SPOTWISE_TOKEN": token}
        ok = spotwise("status", "-o", "json", SPOTWISE_CA_CERT=str(cert), **remote)
        assert ok.returncode == 0, ok.stderr
        assert len(json.loads(ok.stdout)["jobs"]) == 5
        untrusted = spotwise("status", **remote)
        assert untrusted.returncode == 1 and untrusted.stderr.count("\n") == 1
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr and token not in untrusted.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    c = ("-c", str(world.config), "--listen", "127.0.0.1:0")
    half = spotwise("server", *c, "--tls-cert", str(cert))
    assert half.returncode == 2 and "--tls-cert and --tls-key go together" in half.stderr
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    junk = spotwise("server", *c, "--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(key))
    assert junk.returncode == 2 and junk.stderr.startswith("error: the TLS certificate or key")
    other = tmp_path / "other"
    other.mkdir()
    _cert2, key2 = _self_signed(other)
    mismatched = spotwise("server", *c, "--tls-cert", str(cert), "--tls-key", str(key2))
    assert mismatched.returncode == 2 and "KEY_VALUES_MISMATCH" in mismatched.stderr
    assert "Traceback" not in half.stderr + junk.stderr
