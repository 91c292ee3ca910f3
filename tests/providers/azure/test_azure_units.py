"""Pure pieces: the boot script (run with bash), names, errors, scrubbing, settings, README."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError

import providers.azure
from providers.azure.errors import translate
from providers.azure.instances import image_reference, vm_name
from providers.azure.settings import AzureSettings
from providers.azure.userdata import MAX_CUSTOM_DATA, build_script, custom_data
from providers.base import CapacityUnavailable, FatalError, LaunchRejected, QuotaExceeded
from providers.masking import mask_message
from trainer.contract import exit_name, to_uri

bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(tmp_path: Path, script: str) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "shutdown"
    fake.write_text(f'#!/bin/sh\necho "$@" > {shlex.quote(str(tmp_path / "shutdown.args"))}\n')
    fake.chmod(0o755)
    (tmp_path / "boot.sh").write_text(script)
    env = {
        "PATH": os.pathsep.join([str(bindir), os.defpath]),
        "SPOTWISE_STATE_DIR": str(tmp_path / "state"),
        "SPOTWISE_LOG_DIR": str(tmp_path / "log"),
    }
    out = subprocess.run(
        ["bash", str(tmp_path / "boot.sh")], capture_output=True, text=True, timeout=30, env=env
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "shutdown.args").read_text().split() == ["-h", "now"]
    return (tmp_path / "log" / "job.log").read_text()


@bash
def test_boot_script_quotes_and_records_the_exit(tmp_path: Path) -> None:
    store = tmp_path / "check points" / "j"
    env = {"SPOTWISE_ATTEMPT": "3", "SPOTWISE_CHECKPOINT_URI": to_uri(store), "W": "$(id) 'q'"}
    argv = ["sh", "-c", 'printf "%s|%s|" "$1" "$W"; exit 7', "x", "a b; rm -rf /"]
    script = base64.b64decode(custom_data(argv, env)).decode()
    log = _run(tmp_path, script)
    assert log.startswith("a b; rm -rf /|$(id) 'q'|")
    doc = json.loads((store / exit_name(3)).read_text())
    assert doc["attempt"] == 3 and doc["exit_code"] == 7
    assert (tmp_path / "state" / "exit_code").read_text().strip() == "7"


def test_boot_script_rejects_what_it_cannot_express() -> None:
    with pytest.raises(LaunchRejected, match="64 KB"):
        build_script(["x"], {"BIG": "y" * MAX_CUSTOM_DATA})
    with pytest.raises(LaunchRejected):
        build_script(["x"], {"1BAD": "y"})
    with pytest.raises(LaunchRejected, match="scheme"):
        build_script(["x"], {"SPOTWISE_ATTEMPT": "1", "SPOTWISE_CHECKPOINT_URI": "ftp://b/p"})
    s3 = build_script(["true"], {"SPOTWISE_ATTEMPT": "2", "SPOTWISE_CHECKPOINT_URI": "s3://b/p"})
    assert "s3://b/p/exits/2.json" in s3


def test_vm_names_are_deterministic_and_valid() -> None:
    a = vm_name("attempt-1")
    assert a == vm_name("attempt-1") != vm_name("attempt-2")
    assert re.fullmatch(r"sw-[0-9a-f]{24}", a) and len(vm_name("x" * 500)) == 27


def test_image_reference() -> None:
    assert image_reference("a:b:c:latest") == {
        "publisher": "a", "offer": "b", "sku": "c", "version": "latest",
    }  # fmt: skip
    gallery = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/galleries/x/images/y"
    assert image_reference(gallery) == {"id": gallery}
    with pytest.raises(FatalError):
        image_reference("ubuntu")


def _http_error(status: int, code: str, message: str = "m") -> HttpResponseError:
    class _Resp:
        status_code = status
        reason = "x"
        headers: dict[str, str] = {}

        def text(self) -> str:
            return json.dumps({"error": {"code": code, "message": message}})

    err = HttpResponseError(response=_Resp())  # type: ignore[arg-type]
    return err


def test_translate_and_scrub() -> None:
    e = translate(_http_error(409, "ZonalAllocationFailed"), what="x", pool="p", request=True)
    assert isinstance(e, CapacityUnavailable) and e.pool == "p"
    q = translate(
        _http_error(409, "OperationNotAllowed", "exceeds LowPriorityCores quota"), what="x"
    )
    assert isinstance(q, QuotaExceeded)
    assert isinstance(translate(_http_error(400, "InvalidParameter"), what="x", request=True),
                      LaunchRejected)  # fmt: skip
    assert isinstance(translate(_http_error(400, "InvalidParameter"), what="x"), FatalError)
    text = mask_message(
        "Authorization: Bearer abc.def-ghi token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sig",
        ["zzzz"],
    )
    assert "abc.def" not in text and "eyJzdWIiOiIxMjMifQ" not in text


def test_readme_config_example_is_valid() -> None:
    readme = (Path(providers.azure.__file__).parent / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert block is not None
    section = tomllib.loads(block.group(1))["providers"]["azure"]
    s = AzureSettings.model_validate(section)
    assert s.locations == ["eastus", "westus2"] and s.subnet_for("eastus")
