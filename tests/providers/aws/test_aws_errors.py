"""Retries, error classes and credential hygiene through the real botocore retry machinery."""

from __future__ import annotations

import logging

import pytest

from providers.base import FatalError, InstanceState, Throttled, TransientError
from tests.support.aws_fixtures import (
    ACCESS_KEY,
    SECRET,
    ec2_error,
    fail_times,
    launch_request,
    ref,
)

pytestmark = pytest.mark.timeout(60)


def test_throttling_is_retried_then_passes(make_provider, moto, session):
    calls = fail_times(session, "RunInstances", "RequestLimitExceeded", times=2, status=503)
    p = make_provider(prices=False, max_attempts=3)
    (inst,) = p.launch(launch_request())
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
    assert calls == {"n": 3, "failed": 2}


def test_throttling_that_does_not_stop_surfaces_as_throttled(make_provider, moto, session):
    calls = fail_times(session, "DescribeInstances", "RequestLimitExceeded", times=99, status=503)
    p = make_provider(prices=False, max_attempts=4)
    with pytest.raises(Throttled, match="RequestLimitExceeded"):
        p.list_tagged("tests")
    assert calls["n"] == 4


def test_server_errors_are_transient(make_provider, moto, session):
    calls = fail_times(session, "DescribeInstances", "InternalError", times=99, status=500)
    with pytest.raises(TransientError, match="InternalError"):
        make_provider(prices=False, max_attempts=2).describe([ref("i-0123456789abcdef0")])
    assert calls["n"] == 2


def test_unreachable_endpoint_is_transient(make_provider):
    p = make_provider(prices=False, endpoint_url="http://127.0.0.1:9", max_attempts=1)
    with pytest.raises(TransientError, match="EndpointConnectionError"):
        p.list_tagged("tests")


@pytest.mark.slow
def test_credentials_never_leak(make_provider, moto, session, caplog):
    """An auth failure is fatal; no message, event or log line (botocore's debug output
    included) carries the secret."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="botocore")  # whatever configured it before
    fail_times(session, "RunInstances", "AuthFailure", times=99, status=401)
    p = make_provider(prices=False, instance_types=["g5.xlarge"])
    with pytest.raises(FatalError, match="AuthFailure") as exc:
        p.launch(launch_request())
    assert SECRET not in str(exc.value)
    # A fallback event and its warning log, too.
    p2 = make_provider(
        prices=False,
        instance_types=["g5.xlarge"],
        pricing_endpoint_url="http://127.0.0.1:9",
        max_attempts=1,
    )
    p2.offerings()
    events = [e.message for e in [*p.drain_events(), *p2.drain_events()]]
    assert events
    lines = [*events, *(r.getMessage() for r in caplog.records)]
    assert any("botocore" in r.name for r in caplog.records)  # debug logging really ran
    assert not [line for line in lines if SECRET in line]


def test_echoed_credentials_are_scrubbed(make_provider, moto, session, caplog):
    """AWS never echoes a secret, but a proxy might: our messages scrub known credentials,
    access key ids and signatures anyway."""
    caplog.set_level(logging.DEBUG, logger="spotwise")
    echo = f"The security token {ACCESS_KEY} with secret {SECRET} is invalid. Signature=abc123"
    session.events.register(
        "before-send.ec2.RunInstances", lambda **_: ec2_error("AuthFailure", 401, echo)
    )
    with pytest.raises(FatalError) as exc:
        make_provider(prices=False).launch(launch_request())
    text = str(exc.value)
    assert "AuthFailure" in text and "invalid" in text
    assert SECRET not in text and ACCESS_KEY not in text and "abc123" not in text
    assert exc.value.__cause__ is None  # the raw botocore error is not chained into tracebacks
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


def test_missing_profile_is_a_clear_fatal_error(aws_env):
    from providers.aws import AwsProvider, AwsSettings

    with pytest.raises(FatalError, match="no-such-profile"):
        AwsProvider(AwsSettings(profile="no-such-profile"))
