"""Launch: the wire fields of a Spot insert, idempotency, labels, the startup-script, and
capacity/quota/rejection arriving at once or later in the operation."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FailureKind,
    FatalError,
    InstanceState,
    LaunchRejected,
    LaunchRequest,
    Market,
    QuotaExceeded,
)
from providers.gcp import GcpProvider
from providers.gcp.fake import PROJECT, FakeGcp
from providers.gcp.instances import REQUEST_NS, instance_name
from providers.gcp.startup import build_startup_script
from tests.support.gcp_harness import ZONE, t4_offering
from trainer.contract import exit_name

pytestmark = pytest.mark.timeout(60)


def _req(token: str = "job-1.a1", market: Market = Market.SPOT, **kw) -> LaunchRequest:
    fields = {
        "token": token,
        "offering": t4_offering(market),
        "command": ["python", "train.py", "--lr", "0.1"],
        "env": {"SPOTWISE_JOB_ID": "Job-1", "SPOTWISE_ATTEMPT": "1"},
        "tags": {TAG_JOB: "Job-1", TAG_ATTEMPT: "Job-1.A1", TAG_OWNER: "tests"},
    }
    fields.update(kw)
    return LaunchRequest(**fields)  # type: ignore[arg-type]


def _insert_body(fake: FakeGcp) -> tuple[dict, dict]:
    ((_, _, q, body),) = fake.requests("POST", r"/zones/us-central1-a/instances$")
    return q, body


def test_spot_insert_has_the_right_wire_fields(provider: GcpProvider, fake: FakeGcp) -> None:
    (inst,) = provider.launch(_req())
    assert inst.state is InstanceState.PENDING and inst.id == instance_name("job-1.a1")
    assert (inst.zone, inst.market) == (ZONE, Market.SPOT)
    q, body = _insert_body(fake)
    assert q["requestId"] == [str(uuid.uuid5(REQUEST_NS, "insert:job-1.a1"))]
    assert body["name"] == inst.id
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/n1-standard-4"
    assert body["scheduling"] == {
        "provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE", "automaticRestart": False,
        "preemptionNoticeDuration": {"seconds": "120"},
    }  # fmt: skip
    assert body["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}
    ]
    (disk,) = body["disks"]
    assert disk["boot"] and disk["autoDelete"]
    assert disk["initializeParams"]["sourceImage"].startswith("projects/deeplearning-platform")
    assert body["networkInterfaces"][0]["network"] == "global/networks/default"
    assert body["serviceAccounts"][0]["scopes"] == [
        "https://www.googleapis.com/auth/cloud-platform"
    ]
    # GCE label rules: lowercase [a-z0-9_-], <= 63; the scheduler's caps.label() agrees.
    labels = body["labels"]
    assert labels[TAG_JOB] == "job-1" == provider.capabilities.label("Job-1")
    assert labels[TAG_ATTEMPT] == "job-1_a1" == provider.capabilities.label("Job-1.A1")
    assert labels[TAG_OWNER] == "tests"
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    script = items["startup-script"]
    assert "argv=( python train.py --lr 0.1 )" in script
    assert "export SPOTWISE_CLOUD=gcp" in script
    assert "export SPOTWISE_NOTICE_SECONDS=150" in script  # the notice plus the 30 s window
    # A GPU VM: the Deep Learning VM installs its driver only when asked (SkyPilot's
    # gcp-ray.yml.j2 sets the same key), and the job waits for nvidia-smi.
    assert items["install-nvidia-driver"] == "True"
    assert "spotwise_wait_gpu" in script


def test_on_demand_has_no_spot_scheduling(provider: GcpProvider, fake: FakeGcp) -> None:
    provider.launch(_req(market=Market.ON_DEMAND))
    _, body = _insert_body(fake)
    assert "provisioningModel" not in body["scheduling"]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_dws_flex_start_for_on_demand(fake: FakeGcp) -> None:
    from tests.support.gcp_harness import settings

    p = GcpProvider(settings(fake, flex_start_max_run="6h"), owner="tests")
    (inst,) = p.launch(_req(market=Market.ON_DEMAND))
    _, body = _insert_body(fake)
    assert body["scheduling"] == {
        "provisioningModel": "FLEX_START", "instanceTerminationAction": "DELETE",
        "maxRunDuration": {"seconds": "21600"}, "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }  # fmt: skip
    assert body["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    for _ in range(2):
        (seen,) = p.describe([inst.ref])
    assert seen.market is Market.ON_DEMAND and seen.state is InstanceState.RUNNING
    p.launch(_req("spot-too"))  # Spot launches are unchanged
    assert fake.requests("POST", r"/instances$")[-1][3]["scheduling"]["provisioningModel"] == "SPOT"
    with pytest.raises(ValueError):
        settings(fake, flex_start_max_run="30d")


def test_preemption_notice_is_configurable(fake: FakeGcp) -> None:
    from tests.support.gcp_harness import settings

    p = GcpProvider(settings(fake, preemption_notice="0s"), owner="tests")
    p.launch(_req())
    _, body = _insert_body(fake)
    assert "preemptionNoticeDuration" not in body["scheduling"]
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert "export SPOTWISE_NOTICE_SECONDS=30" in items["startup-script"]
    with pytest.raises(ValueError):
        settings(fake, preemption_notice="-5s")


def test_configured_network_image_and_account(fake: FakeGcp) -> None:
    from tests.support.gcp_harness import settings

    p = GcpProvider(
        settings(
            fake, image="projects/p/global/images/mine", disk_size_gb=50,
            subnetwork="regions/us-central1/subnetworks/gpu", network="global/networks/vpc",
            service_account="sa@p.iam.gserviceaccount.com", scopes=["a"], external_ip=False,
        ),
        owner="tests",
    )  # fmt: skip
    p.launch(_req())
    _, body = _insert_body(fake)
    nic = body["networkInterfaces"][0]
    assert nic == {"network": "global/networks/vpc",
                   "subnetwork": "regions/us-central1/subnetworks/gpu"}  # fmt: skip
    assert body["serviceAccounts"] == [{"email": "sa@p.iam.gserviceaccount.com", "scopes": ["a"]}]
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "50"


def test_same_token_twice_gives_one_vm(provider: GcpProvider, fake: FakeGcp) -> None:
    first = provider.launch(_req())
    again = provider.launch(_req())
    assert [i.id for i in again] == [i.id for i in first]
    assert len([k for k in fake.instances if k[1] == first[0].id]) == 1
    assert len(fake.requests("POST", r"/instances$")) == 1
    # A lost reply: the same requestId returns the same operation, never a second VM.
    fake.instances.clear()
    fresh = GcpProvider(provider.settings, owner="tests")
    fresh._instances._get = lambda zone, name: None  # type: ignore[method-assign]
    fresh._instances._ops = lambda zone, names: {}  # type: ignore[method-assign]
    (retry,) = fresh.launch(_req())
    assert retry.id == first[0].id and not fake.instances
    assert len(fake.requests("POST", r"/instances$")) == 2  # sent, and deduplicated by GCE
    found = provider.find_by_token("job-1.a1")
    assert found == []  # (the fake dropped the VM above)


def test_stockout_in_the_operation_is_reported_by_describe(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    fake.fail_insert[ZONE] = ("ZONE_RESOURCE_POOL_EXHAUSTED", "no T4 left", 503, 1)
    (inst,) = provider.launch(_req())
    assert inst.state is InstanceState.PENDING
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.PENDING  # the operation is still running
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.LAUNCH_FAILED
    assert seen.failure is not None and seen.failure.kind is FailureKind.CAPACITY
    assert seen.failure.pool == t4_offering().pool
    assert isinstance(seen.failure.to_error(), CapacityUnavailable)


def test_quota_in_the_operation_and_synchronous_errors(
    provider: GcpProvider, fake: FakeGcp
) -> None:
    fake.fail_insert[ZONE] = ("QUOTA_EXCEEDED", "Quota 'NVIDIA_T4_GPUS' exceeded.", 403, 0)
    (inst,) = provider.launch(_req("q-1"))
    (seen,) = provider.describe([inst.ref])
    assert seen.failure is not None and seen.failure.kind is FailureKind.QUOTA
    fake.reject_insert[ZONE] = (403, "quotaExceeded", "Quota 'GPUS_ALL_REGIONS' exceeded.")
    with pytest.raises(QuotaExceeded) as q:
        provider.launch(_req("q-2"))
    assert q.value.pool == t4_offering().pool
    fake.reject_insert[ZONE] = (
        503, "ZONE_RESOURCE_POOL_EXHAUSTED",
        f"The zone 'projects/{PROJECT}/zones/{ZONE}' does not have enough resources available",
    )  # fmt: skip
    with pytest.raises(CapacityUnavailable) as c:
        provider.launch(_req("q-3"))
    assert not isinstance(c.value, QuotaExceeded)
    fake.reject_insert[ZONE] = (400, "invalid", "Invalid value for field 'resource.metadata'")
    with pytest.raises(LaunchRejected):
        provider.launch(_req("q-4"))
    fake.reject_insert[ZONE] = (403, "forbidden", "Required 'compute.instances.create'")
    with pytest.raises(FatalError):
        provider.launch(_req("q-5"))
    with pytest.raises(LaunchRejected):
        provider.launch(_req("q-6", env={"NOT A NAME": "x"}))
    with pytest.raises(LaunchRejected):
        provider.launch(_req("q-7", count=65))  # more nodes than one request launches


def test_credentials_never_reach_logs_events_or_errors(
    fake: FakeGcp, caplog: pytest.LogCaptureFixture
) -> None:
    from google.oauth2.credentials import Credentials

    from tests.support.gcp_harness import settings

    secret = "ya29.a0-SECRET-token-must-never-be-printed-123456"
    creds = Credentials(token=secret)
    p = GcpProvider(settings(fake, credentials="adc"), owner="tests", credentials=creds)
    caplog.set_level(logging.DEBUG)
    fake.reject_insert[ZONE] = (403, "forbidden", f"bad token {secret}")
    with pytest.raises(FatalError) as info:
        p.launch(_req("c-1"))
    fake.fail_skus = True
    with pytest.raises(Exception) as off:
        p.offerings()
    assert fake.auth_headers and all(secret in h for h in fake.auth_headers)  # it was sent
    text = " ".join([str(info.value), str(off.value), caplog.text,
                     *(e.message for e in p.drain_events())])  # fmt: skip
    assert secret not in text and "SECRET-token" not in text


def _run(tmp: Path, script: str, pythonpath: Path | None = None) -> str:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "shutdown").write_text(f'#!/bin/sh\necho "$@" > {shlex.quote(str(tmp / "off"))}\n')
    (bindir / "shutdown").chmod(0o755)
    (tmp / "s.sh").write_text(script)
    import sys

    env = {
        "PATH": os.pathsep.join([str(bindir), os.path.dirname(sys.executable), os.defpath]),
        "SPOTWISE_STATE_DIR": str(tmp / "state"), "SPOTWISE_LOG_DIR": str(tmp / "log"),
    }  # fmt: skip
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run(["bash", str(tmp / "s.sh")], capture_output=True, text=True,
                         timeout=30, env=env, cwd=tmp)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp / "off").read_text().split() == ["-h", "now"]
    return (tmp / "log" / "job.log").read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_startup_script_runs_the_command_and_records_the_exit(tmp_path: Path) -> None:
    store = tmp_path / "ckpt store"
    env = {"SPOTWISE_ATTEMPT": "2", "SPOTWISE_CHECKPOINT_URI": store.as_uri(), "W": "$(id) 'q'"}
    argv = ["sh", "-c", 'printf "%s|%s|%s" "$1" "$W" "$SPOTWISE_ATTEMPT"; exit 3', "-", "a b"]
    (tmp_path / "one").mkdir()
    log = _run(tmp_path / "one", build_startup_script(argv, env))
    assert log.startswith("a b|$(id) 'q'|2")
    doc = json.loads((store / exit_name(2)).read_text())
    assert doc["attempt"] == 2 and doc["exit_code"] == 3
    # A second boot of the same VM does not run the attempt again.
    again = subprocess.run(["bash", str(tmp_path / "one" / "s.sh")], capture_output=True,
                           env={"SPOTWISE_STATE_DIR": str(tmp_path / "one" / "state"),
                                "PATH": os.defpath}, timeout=30)  # fmt: skip
    assert again.returncode == 0
    # With trainer.outcome on the box, it runs the command and owns the record.
    py = tmp_path / "py" / "trainer"
    py.mkdir(parents=True)
    (py / "__init__.py").write_text("")
    (py / "outcome.py").write_text(
        "import json, subprocess, sys\nif __name__ == '__main__':\n"
        "    args = sys.argv[1:]\n    sep = args.index('--')\n"
        "    rc = subprocess.call(args[sep + 1:])\n"
        f"    open({str(tmp_path / 'outcome.json')!r}, 'w').write(json.dumps([args[:sep], rc]))\n"
        "    sys.exit(rc)\n"
    )
    (tmp_path / "two").mkdir()
    _run(tmp_path / "two", build_startup_script(["sh", "-c", "exit 4"], env), tmp_path / "py")
    args, rc = json.loads((tmp_path / "outcome.json").read_text())
    assert args == ["--uri", store.as_uri(), "--attempt", "2"] and rc == 4
    with pytest.raises(LaunchRejected, match="256 KB"):
        build_startup_script(["x"], {"BIG": "y" * 300_000})
