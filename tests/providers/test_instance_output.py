"""Each cloud states where its instances' job output is and how to fetch the console, without
loading its SDK: `spotwise show` and `logs` read it through providers.instance_output."""

from __future__ import annotations

import subprocess
import sys

from providers.boot_script import INSTANCE_LOG
from providers.instance_output import instance_output
from providers.regions import CLOUDS


def test_every_cloud_states_its_console_and_the_boot_script_log() -> None:
    for cloud in CLOUDS:
        out = instance_output(cloud)
        assert out.log_path == INSTANCE_LOG
        assert out.console("i-1", "r-1", "z-1"), cloud
    aws = instance_output("aws").console("i-0abc", "us-east-1", "us-east-1a")
    assert aws == "aws ec2 get-console-output --region us-east-1 --instance-id i-0abc"
    gcp = instance_output("gcp").console("sw-1", "us-central1", "us-central1-a")
    assert gcp == "gcloud compute instances get-serial-port-output sw-1 --zone us-central1-a"


def test_a_cloud_that_states_nothing_has_the_log_path_and_no_console() -> None:
    out = instance_output("fake")
    assert out.log_path == INSTANCE_LOG and out.console("x", None, None) is None


def test_asking_loads_no_cloud_sdk() -> None:
    code = (
        "import sys\n"
        "from providers.instance_output import instance_output\n"
        "for c in ('aws', 'gcp', 'azure'):\n"
        "    instance_output(c)\n"
        "sdks = ('boto3', 'botocore', 'google.cloud', 'google.api_core', 'azure.core')\n"
        "print(sorted(m for m in sys.modules if m.startswith(sdks)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
