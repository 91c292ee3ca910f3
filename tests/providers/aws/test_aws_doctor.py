"""`spotwise doctor` on AWS, through the CLI: the checks pass under the shipped policy, and
under the policy the README used to ship the Spot launch is refused, the line names the
missing permission and its fix, and the exit status is 1."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from providers.aws.fake_iam import IamFake
from providers.aws.settings import DEFAULT_AMI
from tests.providers.aws.test_aws_iam_policy import FIXTURES, shipped_policy
from tests.support.aws_fixtures import REGION, spot_price

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def doctor(moto: str, pricing: Any, session: boto3.Session, monkeypatch, tmp_path: Path):
    """Run `spotwise doctor` with the CLI's boto3 sessions under the IAM fake."""

    def run(policy: dict[str, Any], *args: str) -> Any:
        from scheduler.cli.app import app

        fake = IamFake(policy)
        fake.ssm_parameters[DEFAULT_AMI.removeprefix("resolve:ssm:")] = "ami-0123456789abcdef0"

        def make_session(**_: Any) -> boto3.Session:
            fake.install(session)

            def prices(parsed: dict[str, Any], **_: Any) -> None:
                for row in parsed.get("SpotPriceHistory", []):
                    row["SpotPrice"] = str(spot_price(row["InstanceType"], row["AvailabilityZone"]))

            session.events.register("after-call.ec2.DescribeSpotPriceHistory", prices)
            return session

        sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto)
        queue = sqs.create_queue(QueueName="spotwise-interruptions")["QueueUrl"]
        # Only the adapter's sessions (providers/aws/api.py builds one per provider).
        monkeypatch.setattr("providers.aws.api.boto3", SimpleNamespace(Session=make_session))
        cfg = tmp_path / "spotwise.toml"
        cfg.write_text(
            f'[daemon]\nstate_dir = "{tmp_path}/state"\n\n[providers.aws]\n'
            f'regions = ["{REGION}"]\ninstance_types = ["g5.xlarge"]\n'
            f'endpoint_url = "{moto}"\npricing_endpoint_url = "{pricing.url}"\n'
            f'sts_endpoint_url = "{moto}"\nssm_endpoint_url = "{moto}"\n'
            f'sqs_endpoint_url = "{moto}"\nsqs_queue_url = {{ {REGION} = "{queue}" }}\n'
        )
        return CliRunner().invoke(app, ["doctor", "-c", str(cfg), *args], env={"COLUMNS": "80"})

    return run


def test_doctor_passes_under_the_shipped_policy(doctor) -> None:
    result = doctor(shipped_policy())
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "ok      aws    identity: arn:aws:sts::123456789012" in out
    assert "permission ec2:RunInstances (spot) in us-east-1" in out
    assert "interruption queue in us-east-1" in out
    assert "no problems: ready for the first job" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_doctor_names_the_missing_spot_permission_and_its_fix(doctor) -> None:
    before = json.loads((FIXTURES / "iam-policy-before.json").read_text())["policy"]
    text = doctor(before)
    assert (
        text.exit_code == 1 and "PROBLEM aws    permission ec2:RunInstances (spot)" in text.stdout
    )
    result = doctor(before, "-o", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    problems = {c["check"]: c for c in doc["checks"] if c["status"] == "problem"}
    spot = problems["permission ec2:RunInstances (spot) in us-east-1"]
    assert "spot-instances-request/*" in spot["detail"]
    assert "providers/aws/iam-policy.json" in spot["fix"]
    # The old policy could not resolve the default AMI nor make a gang's placement group.
    assert (
        "image in us-east-1" in problems
        and "ssm:GetParameters" in problems["image in us-east-1"]["detail"]
    )
    assert "permission ec2:CreatePlacementGroup in us-east-1" in problems
    assert doc["problems"] == len(problems)
