"""The AWS conformance harness: AwsProvider over moto's ThreadedMotoServer.

Standalone (the conformance suite lives outside this package and cannot use its fixtures):
the server starts lazily, once per process, and stops at exit; the aws package's conftest
uses the same server. Credentials are fixed test values on the session, never the
environment's, so a developer's real account is never reached.
"""

from __future__ import annotations

import atexit
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from moto.server import ThreadedMotoServer  # without moto, the conformance suite skips aws

from providers.aws import AwsProvider, AwsSettings
from providers.aws.parse import CLOUD
from providers.base import Market, Offering, ResourceRef
from tests.support.conformance import OWNER, Harness

REGION = "us-east-1"
_lock = threading.Lock()
_url: str | None = None


def moto_server_url() -> str:
    """The one moto server of this process (started on first use)."""
    global _url
    with _lock:
        if _url is None:
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            atexit.register(server.stop)
            host, port = server.get_host_and_port()
            _url = f"http://{host}:{port}"
        return _url


class _Raw:
    def stream(self, **_: Any) -> Any:
        yield b""


def parsed_error(code: str, status: int = 500) -> tuple[AWSResponse, dict[str, Any]]:
    """A before-call answer: botocore skips the wire (and its retries) and raises this."""
    parsed = {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {}}
    parsed["ResponseMetadata"]["HTTPStatusCode"] = status
    return AWSResponse("http://127.0.0.1/", status, {}, _Raw()), parsed


def aws_harness(tmp_path: Path) -> Harness:
    """A provider on the shared moto server; capacity errors come from a before-call hook
    answering the next RunInstances (moto itself never runs out)."""

    url = moto_server_url()
    session = boto3.Session(
        aws_access_key_id="AKIAHARNESS000000000",
        aws_secret_access_key="harness-secret",
        region_name=REGION,
    )
    fail_next = {"code": None}

    def before_run(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        code, fail_next["code"] = fail_next["code"], None
        return parsed_error(code) if code else None

    session.events.register("before-call.ec2.RunInstances", before_run)
    settings = AwsSettings.model_validate({
        "regions": [REGION], "endpoint_url": url, "ami": "ami-0123456789abcdef0",
        "pricing_endpoint_url": "http://127.0.0.1:9", "max_attempts": 2,
        "connect_timeout": "2s", "read_timeout": "10s",
    })  # fmt: skip
    provider = AwsProvider(settings, owner=OWNER, session=session)
    offer = Offering(
        CLOUD, REGION, "us-east-1b", "g5.xlarge", "A10G", 1, 24.0, 4, 16, Market.SPOT, 0.33,
        datetime.now(UTC),
    )  # fmt: skip

    def capacity() -> None:
        fail_next["code"] = "InsufficientInstanceCapacity"

    h = Harness(
        provider, offer, inject_capacity=capacity,
        # MinCount = MaxCount: EC2 refuses the whole request, as it answers a pool short of it.
        inject_gang_capacity=lambda _n: capacity(),
        unknown_ref=ResourceRef("i-0123456789abcdef0", REGION, "us-east-1b"), visible_within=30,
    )  # fmt: skip
    h.cleanup.append(lambda: provider.terminate([t.ref for t in provider.list_tagged(OWNER)]))
    return h
