"""Pure pieces of the AWS adapter: parsing, quoting, settings, error mapping (no server)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from pydantic import ValidationError

from providers.aws.errors import translate
from providers.aws.fake_pricing import product
from providers.aws.instance_types import (
    canonical_gpu,
    gpu_memory_gb,
    latest_linux_prices,
    parse_instance_type,
)
from providers.aws.instances import client_token
from providers.aws.notices import parse_message, queue_region
from providers.aws.parse import end_reason, region_of_zone, transition_time
from providers.aws.pricing import load_snapshot, parse_product
from providers.aws.settings import DEFAULT_AMI, AwsSettings
from providers.aws.userdata import MAX_USER_DATA, build_user_data
from providers.base import (
    CapacityUnavailable,
    EndReason,
    FatalError,
    LaunchRejected,
    NotPermitted,
    QuotaExceeded,
    Throttled,
    TransientError,
)
from providers.masking import mask_message
from tests.support.aws_fixtures import eventbridge_warning
from trainer.contract import exit_name, to_uri

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("mib", "gb"),
    [(22888, 24.0), (40960, 40.0), (81920, 80.0), (144384, 141.0), (45776, 48.0), (16384, 16.0)],
)
def test_gpu_memory_as_sold(mib, gb):
    assert gpu_memory_gb(mib) == gb


def test_canonical_gpu_names():
    """providers.gpus names, memory variants apart; GPUs no job can name are not offered."""
    cases = [("A10G", 24.0), ("a100", 40.0), ("A100", 80.0), ("T4g", 16.0), ("L40S", 48.0),
             ("V100", 16.0), ("V100", 32.0), ("H100", 80.0), ("L4", 24.0)]  # fmt: skip
    assert [canonical_gpu(n, m) for n, m in cases] == [
        ("A10G", 24.0), ("A100", 40.0), ("A100", 80.0), ("T4G", 16.0), ("L40S", 48.0),
        ("V100", 16.0), ("V100", 32.0), ("H100", 80.0), ("L4", 24.0),
    ]  # fmt: skip
    assert canonical_gpu("Radeon Pro V520", 8.0) == ("V520", 8.0)  # in the registry now
    odd = [{"Name": "Gaudi HL-205", "Count": 1, "MemoryInfo": {"SizeInMiB": 32768}}]
    assert canonical_gpu("Gaudi HL-205", 32.0) is None
    assert parse_instance_type(_itype("dl1.24xlarge", odd), ["x86_64"]) is None


def _itype(name, gpus, arch="x86_64"):
    return {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": 8},
        "MemoryInfo": {"SizeInMiB": 32768},
        "ProcessorInfo": {"SupportedArchitectures": [arch]},
        "GpuInfo": {"Gpus": gpus} if gpus else None,
        "SupportedUsageClasses": ["on-demand"],
    }


def test_parse_instance_type_filters():
    l4 = [{"Name": "L4", "Count": 1, "MemoryInfo": {"SizeInMiB": 22888}}]
    t = parse_instance_type(_itype("g6.2xlarge", l4), ["x86_64"])
    assert t is not None and (t.gpu_model, t.gpu_count, t.gpu_memory_gb) == ("L4", 1, 24.0)
    assert (t.vcpus, t.memory_gb, t.spot, t.on_demand) == (8, 32, False, True)
    frac = [{"Name": "L4", "Count": 0, "MemoryInfo": {"SizeInMiB": 2861}}]
    assert parse_instance_type(_itype("g6f.large", frac), ["x86_64"]) is None
    assert parse_instance_type(_itype("g5g.xlarge", l4, "arm64"), ["x86_64"]) is None
    assert parse_instance_type(_itype("g5g.xlarge", l4, "arm64"), ["arm64"]) is not None
    assert parse_instance_type(_itype("m5.large", None), ["x86_64"]) is None


def test_latest_linux_prices():
    t0 = datetime(2026, 11, 29, 10, tzinfo=UTC)
    t1 = datetime(2026, 11, 29, 11, tzinfo=UTC)

    def row(product, price, ts, zone="us-east-1a"):
        return {
            "AvailabilityZone": zone,
            "InstanceType": "g5.xlarge",
            "ProductDescription": product,
            "SpotPrice": price,
            "Timestamp": ts,
        }

    rows = [
        row("Linux/UNIX", "0.50", t0),
        row("Linux/UNIX", "0.45", t1),
        row("Windows", "0.01", t1),
        row("SUSE Linux", "0.02", t1),
        row("Linux/UNIX (Amazon VPC)", "0.44", t1, "us-east-1b"),
        row("Linux/UNIX", "0.99", t1, "us-east-1b"),
        row("Linux/UNIX", "bogus", t1, "us-east-1c"),
    ]
    assert latest_linux_prices(rows) == {
        ("us-east-1a", "g5.xlarge"): 0.45,
        ("us-east-1b", "g5.xlarge"): 0.44,
    }


def test_parse_product_and_snapshot():
    assert parse_product(product("us-east-1", "g5.xlarge", 1.006)) == ("g5.xlarge", 1.006)
    assert parse_product(product("us-east-1", "g5.xlarge", 0.1, "RunInstances:0002")) is None
    snap = load_snapshot()
    assert snap[("us-east-1", "p4d.24xlarge")] == 21.957642
    assert snap[("us-west-2", "g5.xlarge")] == 1.006
    assert all(v > 0 for v in snap.values())


def test_client_token():
    assert client_token("job-1.attempt-2") == "job-1.attempt-2"
    long = client_token("x" * 65)
    assert len(long) == 64 and long.startswith("sw-") and long == client_token("x" * 65)
    assert client_token("has space") != "has space"


def _run_boot_script(tmp_path, script, extra_path=None, pythonpath=None):
    """Run the whole boot script with bash, as cloud-init would, but with a fake `shutdown`
    and state/log directories under tmp_path (no root, no IMDS, no AWS CLI)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "shutdown"
    fake.write_text(f'#!/bin/sh\necho "$@" > {shlex.quote(str(tmp_path / "shutdown.args"))}\n')
    fake.chmod(0o755)
    (tmp_path / "boot.sh").write_text(script)
    env = {
        "PATH": os.pathsep.join([str(bindir), *(extra_path or []), os.defpath]),
        "SPOTWISE_STATE_DIR": str(tmp_path / "state"),
        "SPOTWISE_LOG_DIR": str(tmp_path / "log"),
    }
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run(["bash", str(tmp_path / "boot.sh")], capture_output=True, text=True,
                         timeout=30, env=env, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "shutdown.args").read_text().split() == ["-h", "now"]
    return (tmp_path / "log" / "job.log").read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_user_data_quotes_argv_and_env(tmp_path):
    argv = ["printf", "%s|", "a b", "it's", "$HOME", "`id`", "; rm -rf /", "line\nbreak"]
    env = {"SPOTWISE_JOB_ID": "j 1", "WEIRD": "$(id) 'q' \"d\""}
    script = build_user_data([*argv, "$SPOTWISE_JOB_ID"], env)
    log = _run_boot_script(tmp_path, script)
    # Each argument arrives intact (nothing expanded), and the environment is exported.
    assert log.startswith("a b|it's|$HOME|`id`|; rm -rf /|line\nbreak|$SPOTWISE_JOB_ID|")
    assert "exit code not recorded" in log  # no checkpoint URI in this env
    check = build_user_data(["sh", "-c", 'printf "%s|%s" "$SPOTWISE_JOB_ID" "$WEIRD"'], env)
    (tmp_path / "b").mkdir()
    assert _run_boot_script(tmp_path / "b", check).startswith("j 1|$(id) 'q' \"d\"")
    assert (tmp_path / "state" / "exit_code").read_text().strip() == "0"
    with pytest.raises(LaunchRejected, match="16 KB"):
        build_user_data(["x"], {"BIG": "y" * MAX_USER_DATA})
    with pytest.raises(LaunchRejected):
        build_user_data(["x"], {"1BAD": "y"})


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_boot_script_records_the_exit_in_the_checkpoint_store(tmp_path):
    """Without trainer.outcome on the box, the script writes exits/<N>.json itself; the
    store is a file:// URI whose path has a space (percent-escaped) in it."""
    store = tmp_path / "check points" / "job-1"
    uri = to_uri(store)
    assert "%20" in uri
    env = {"SPOTWISE_ATTEMPT": "3", "SPOTWISE_CHECKPOINT_URI": uri}
    script = build_user_data(["sh", "-c", "echo working; exit 7"], env)
    log = _run_boot_script(tmp_path, script)
    assert "working" in log
    doc = json.loads((store / exit_name(3)).read_text())
    assert doc["attempt"] == 3 and doc["exit_code"] == 7
    assert datetime.fromisoformat(doc["at"].replace("Z", "+00:00")).tzinfo is not None
    assert not list((store / "exits").glob(".*"))  # written via a temp file, renamed
    assert (tmp_path / "state" / "exit_code").read_text().strip() == "7"
    # A missing command still ends with a record (127), and the box still powers off.
    _run_boot_script(tmp_path, build_user_data(["no-such-command-xyz"], env))
    assert json.loads((store / exit_name(3)).read_text())["exit_code"] == 127
    # s3 stores are written with the AWS CLI, to the key trainer.contract names.
    s3 = build_user_data(["true"], {"SPOTWISE_ATTEMPT": "2",
                                    "SPOTWISE_CHECKPOINT_URI": "s3://bkt/ckpt/job 1/"})  # fmt: skip
    assert "aws s3 cp --only-show-errors - 's3://bkt/ckpt/job 1/exits/2.json'" in s3
    with pytest.raises(LaunchRejected, match="scheme"):
        build_user_data(["true"], {"SPOTWISE_ATTEMPT": "2", "SPOTWISE_CHECKPOINT_URI": "ftp://b/p"})


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_boot_script_uses_trainer_outcome_when_the_box_has_it(tmp_path):
    """With trainer.outcome importable, the command runs under it (it writes the record)."""
    fake = tmp_path / "py" / "trainer"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "outcome.py").write_text(
        "import json, subprocess, sys\n"
        "if __name__ == '__main__':\n"
        "    args = sys.argv[1:]\n"
        "    sep = args.index('--')\n"
        "    rc = subprocess.call(args[sep + 1:])\n"
        f"    open({str(tmp_path / 'outcome.json')!r}, 'w').write(json.dumps([args[:sep], rc]))\n"
        "    sys.exit(rc)\n"
    )
    store = tmp_path / "store dir"
    env = {"SPOTWISE_ATTEMPT": "4", "SPOTWISE_CHECKPOINT_URI": to_uri(store)}
    python = os.path.dirname(sys.executable)
    script = build_user_data(["sh", "-c", "exit 5"], env)
    _run_boot_script(tmp_path, script, extra_path=[python], pythonpath=tmp_path / "py")
    wrapper_args, rc = json.loads((tmp_path / "outcome.json").read_text())
    assert wrapper_args == ["--uri", to_uri(store), "--attempt", "4"] and rc == 5
    assert not (store / exit_name(4)).exists()  # the wrapper owns the record then
    assert (tmp_path / "state" / "exit_code").read_text().strip() == "5"


def test_end_reasons_and_times():
    assert end_reason("Server.SpotInstanceTermination") is EndReason.INTERRUPTED
    assert end_reason("Client.UserInitiatedShutdown") is EndReason.TERMINATED
    assert end_reason("Client.InstanceInitiatedShutdown") is EndReason.EXITED
    assert end_reason("Server.InternalError") is EndReason.LAUNCH_FAILED
    assert end_reason("Server.NewCodeNobodyKnows") is EndReason.UNKNOWN
    assert end_reason(None) is EndReason.UNKNOWN
    when = datetime(2026, 11, 29, 15, 2, tzinfo=UTC)
    assert transition_time("User initiated (2026-11-29 15:02:00 GMT)") == when
    assert transition_time("User initiated (2026-11-29 15:02:00 UTC)") == when
    assert transition_time("") is None
    assert region_of_zone("us-east-1b") == "us-east-1"
    assert region_of_zone("us-gov-west-1a") == "us-gov-west-1"
    assert region_of_zone("us-east-1-bos-1a") == "us-east-1"


def _client_error(code, status=400, message="m"):
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "RunInstances",
    )


def test_translate():
    pool = "aws/us-east-1a/p5.48xlarge/spot"
    cap = translate(_client_error("InsufficientInstanceCapacity", 500), what="x", pool=pool)
    assert type(cap) is CapacityUnavailable and cap.pool == pool
    q = translate(_client_error("VcpuLimitExceeded"), what="x", pool=pool)
    assert type(q) is QuotaExceeded and q.pool == pool
    assert type(translate(_client_error("RequestLimitExceeded", 503), what="x")) is Throttled
    assert type(translate(_client_error("Anything", 429), what="x")) is Throttled
    assert type(translate(_client_error("InternalError", 500), what="x")) is TransientError
    assert type(translate(_client_error("UnauthorizedOperation", 403), what="x")) is NotPermitted
    bad = _client_error("InvalidParameterValue")
    assert type(translate(bad, what="x", request=True)) is LaunchRejected
    assert type(translate(bad, what="x")) is FatalError  # not a job's request: our bug
    assert type(translate(NoCredentialsError(), what="x")) is FatalError
    conn = EndpointConnectionError(endpoint_url="http://x")
    assert type(translate(conn, what="x")) is TransientError


def test_scrub():
    text = "key AKIAABCDEFGHIJKLMNOP sig Signature=deadbeef&X-Amz-Security-Token=tok s3cr3t-value"
    out = mask_message(text, ["s3cr3t-value"])
    assert "AKIA" not in out and "deadbeef" not in out and "tok" not in out
    assert "s3cr3t-value" not in out
    assert len(mask_message("x" * 5000)) < 500


def test_settings():
    s = AwsSettings.model_validate(
        {"regions": ["us-east-1", "eu-west-1"], "subnet_id": "subnet-1", "price_refresh": "2m"}
    )
    assert s.subnet_ids == ["subnet-1"] and s.price_refresh.total_seconds() == 120
    assert s.ami_for("eu-west-1") == DEFAULT_AMI
    assert s.pricing_region == "us-east-1" and s.max_attempts >= 1
    per = AwsSettings(regions=["us-east-1"], ami={"us-east-1": "ami-1"})
    assert per.ami_for("us-east-1") == "ami-1"
    with pytest.raises(ValidationError, match="no AMI given for region"):
        AwsSettings(regions=["us-east-1", "us-west-2"], ami={"us-east-1": "ami-1"})
    with pytest.raises(ValidationError, match="not an AWS region"):
        AwsSettings(regions=["useast1"])
    with pytest.raises(ValidationError):
        AwsSettings.model_validate({"secret_access_key": "nope"})  # no credentials in config
    with pytest.raises(ValidationError):
        AwsSettings.model_validate({"retry_mode": "aggressive"})


def test_notices_parsing():
    when = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
    assert parse_message(eventbridge_warning("i-1", when)) == ("i-1", when)
    import json

    sns = json.dumps({"Type": "Notification", "Message": eventbridge_warning("i-2", when)})
    assert parse_message(sns) == ("i-2", when)
    assert parse_message("not json") is None
    assert parse_message('{"detail-type": "EC2 Instance Rebalance Recommendation"}') is None
    from providers.aws.notices import REBALANCE, parse_event
    from tests.support.aws_fixtures import eventbridge_rebalance

    assert parse_event(eventbridge_rebalance("i-3", when)) == (REBALANCE, "i-3", when)
    assert parse_message(eventbridge_rebalance("i-3", when)) is None  # not a warning
    assert queue_region("https://sqs.eu-west-1.amazonaws.com/123/q") == "eu-west-1"
    assert queue_region("http://127.0.0.1:5000/123/q") is None


def test_readme_config_example_is_valid():
    import re
    import tomllib
    from pathlib import Path

    import providers.aws

    readme = (Path(providers.aws.__file__).parent / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.S).group(1)
    section = tomllib.loads(block)["providers"]["aws"]
    s = AwsSettings.model_validate(section)
    assert s.regions == ["us-east-1", "us-west-2"] and s.retry_mode == "adaptive"


def test_capabilities_state_ec2s_rules():
    from datetime import timedelta

    from providers.aws import AwsProvider

    caps = AwsProvider.capabilities
    assert caps.idempotency_window == timedelta(hours=24)  # EC2: "at least 24 hours"
    assert caps.visibility_delay >= timedelta(minutes=1)
    assert caps.max_count > 1 and caps.placement_groups and not caps.launch_completes_later
    assert caps.label("x" * 300) == "x" * 256
    assert caps.label("Job: a/b=c+d@e ü") == "Job: a/b=c+d@e ü"  # EC2 keeps case and symbols
    assert caps.label("a\nb") == "a_b"


def test_node_index_from_tag_or_launch_index():
    from providers.aws.parse import node_index, to_instance

    assert node_index({"AmiLaunchIndex": 2}, {}) == 2  # the tag could not be written
    assert node_index({"AmiLaunchIndex": 2}, {"spotwise-node": "2"}) == 2
    assert node_index({}, {}) == 0
    raw = {"InstanceId": "i-1", "State": {"Name": "running"}, "AmiLaunchIndex": 1,
           "Placement": {"AvailabilityZone": "us-east-1-atl-1a"}}  # fmt: skip
    inst = to_instance(raw, datetime(2026, 1, 1, tzinfo=UTC))
    assert (inst.node, inst.region, inst.zone) == (1, "us-east-1", "us-east-1-atl-1a")
    assert inst.pool == "aws/us-east-1-atl-1a//on-demand"
