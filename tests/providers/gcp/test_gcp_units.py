"""Pure pieces: settings validation, names and requestIds, error classification, scrubbing."""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from google.api_core import exceptions as gexc
from pydantic import ValidationError

from providers.base import (
    CapacityUnavailable,
    FatalError,
    LaunchRejected,
    QuotaExceeded,
    Throttled,
    TransientError,
)
from providers.gcp import GcpProvider, GcpSettings
from providers.gcp.errors import norm, translate
from providers.gcp.instances import instance_name, request_id
from providers.gcp.provider import CAPABILITIES
from providers.masking import mask_message


def test_settings_validation() -> None:
    s = GcpSettings(project="p-1", api_endpoint="http://127.0.0.1:9/")
    assert s.regions == ["us-central1"] and s.api_endpoint == "http://127.0.0.1:9"
    assert s.credentials == "adc"
    with pytest.raises(ValidationError, match="http"):
        GcpSettings(project="p", api_endpoint="127.0.0.1:9")
    with pytest.raises(ValidationError, match="region"):
        GcpSettings(project="p", regions=["us-central1-a"])
    with pytest.raises(ValidationError, match="zone"):
        GcpSettings(project="p", zones=["europe-west4-a"])
    with pytest.raises(ValidationError):
        GcpSettings(project="p", credentials="my-secret-key")
    with pytest.raises(ValidationError):
        GcpSettings.model_validate({"project": "p", "typo": 1})
    with pytest.raises(ValidationError, match="subnetwork"):
        GcpSettings(project="p", regions=["us-central1", "europe-west4"],
                    subnetwork={"us-central1": "x"})  # fmt: skip


def test_config_section_parses_and_builds_the_provider(tmp_path) -> None:
    from scheduler.core.clock import RealClock
    from scheduler.core.config import parse_config
    from scheduler.daemon.wiring import build_providers, clock_for

    cfg = parse_config(
        '[providers.gcp]\nproject = "p-1"\napi_endpoint = "http://127.0.0.1:9"\n'
        'credentials = "anonymous"\nprice_refresh = "2m"\n',
        source="<t>",
    )
    assert cfg.providers.gcp is not None and cfg.providers.gcp.price_refresh.total_seconds() == 120
    assert cfg.providers.local is None  # gcp alone is a configured provider
    providers = build_providers(cfg)
    assert list(providers) == ["gcp"] and isinstance(providers["gcp"], GcpProvider)
    assert isinstance(clock_for(cfg), RealClock)
    off = parse_config('[providers.gcp]\nproject = "p"\nenabled = false\n', source="<t>")
    assert "gcp" not in build_providers(off)


def test_anonymous_credentials_are_a_logged_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    GcpProvider(GcpSettings(project="p", credentials="anonymous"))
    assert "anonymous" in caplog.text


def test_instance_names_and_request_ids() -> None:
    for token in ["job-1.a1", "J" * 200, "ünïcode token!", "---", "0-start"]:
        name = instance_name(token)
        assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name), name
        assert name == instance_name(token)
    assert instance_name("a" * 100 + "x") != instance_name("a" * 100 + "y")
    rid = request_id("job-1.a1")
    assert uuid.UUID(rid).version == 5 and rid == request_id("job-1.a1")
    assert rid != request_id("job-1.a2") and rid != request_id("job-1.a1", "delete")


def test_label_rules() -> None:
    assert CAPABILITIES.label("Job_1.Attempt-2") == "job_1_attempt-2"
    assert len(CAPABILITIES.label("x" * 100)) == 63
    assert CAPABILITIES.lowercase_labels and CAPABILITIES.launch_completes_later


def _api_error(cls, reason: str, msg: str = "m"):
    return cls(msg, errors=[{"reason": reason, "message": msg}])


def test_error_translation() -> None:
    assert norm("quotaExceeded") == "QUOTA_EXCEEDED"
    assert norm("ZONE_RESOURCE_POOL_EXHAUSTED") == "ZONE_RESOURCE_POOL_EXHAUSTED"
    q = translate(_api_error(gexc.Forbidden, "quotaExceeded"), what="x", pool="p", request=True)
    assert isinstance(q, QuotaExceeded) and q.pool == "p"
    c = translate(
        gexc.ServiceUnavailable("The zone 'z' does not have enough resources available"),
        what="x", pool="p", request=True,
    )  # fmt: skip
    assert isinstance(c, CapacityUnavailable) and not isinstance(c, QuotaExceeded)
    bad = _api_error(gexc.BadRequest, "invalid")
    assert isinstance(translate(bad, what="x", request=True), LaunchRejected)
    assert isinstance(translate(bad, what="x"), FatalError)  # not a job's request: config
    image = _api_error(
        gexc.BadRequest, "invalid",
        "Invalid value for field 'resource.disks[0].initializeParams.sourceImage'",
    )  # fmt: skip
    assert isinstance(translate(image, what="x", request=True), FatalError)  # operator's image
    assert isinstance(translate(_api_error(gexc.Forbidden, "rateLimitExceeded"), what="x"),
                      Throttled)  # fmt: skip
    assert isinstance(translate(gexc.TooManyRequests("slow"), what="x"), Throttled)
    assert isinstance(translate(gexc.InternalServerError("boom"), what="x"), TransientError)
    assert isinstance(translate(ConnectionError("reset"), what="x"), TransientError)
    from google.auth.exceptions import DefaultCredentialsError

    assert isinstance(translate(DefaultCredentialsError("none"), what="x"), FatalError)


def test_scrub() -> None:
    text = "Bearer ya29.abcDEF-123 and ?key=AIzaSECRET&x=1 and ya29.other_tok"
    out = mask_message(text, ["custom-secret"])
    assert "abcDEF" not in out and "AIzaSECRET" not in out and "other_tok" not in out
    assert "***" in mask_message("has custom-secret inside", ["custom-secret"])
