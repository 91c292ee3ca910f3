"""The one credential masker: every registered credential shape is masked by the masker itself,
in the daemon's log lines and in each cloud's error messages."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from azure.core.exceptions import HttpResponseError
from botocore.exceptions import ClientError
from google.api_core import exceptions as gexc

from providers import masking
from providers.aws.errors import translate as aws_translate
from providers.azure.errors import translate as azure_translate
from providers.gcp.errors import translate as gcp_translate
from scheduler.core.errors import mask_urls
from scheduler.daemon.logs import OneLineFormatter
from scheduler.state.db import redact_url

RULES = masking.rules()


def _ids(rule: masking.Rule) -> str:
    return rule.name


def test_every_shipped_cloud_registers_its_shapes() -> None:
    names = {r.name for r in RULES}
    for cloud in masking.SHIPPED_CLOUDS:
        assert any(n.startswith(f"{cloud}-") for n in names), cloud
    for shape in ("url-password", "bearer-token", "authorization-header"):
        assert shape in names
    assert len(names) == len(RULES), "two rules share a name"


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_each_rule_masks_its_example(rule: masking.Rule) -> None:
    assert rule.secret in rule.example
    alone = rule.pattern.sub(rule.replacement, rule.example)
    assert rule.secret not in alone and masking.MASK in alone
    assert rule.secret not in masking.mask(rule.example)


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_log_lines_are_masked(rule: masking.Rule) -> None:
    record = logging.LogRecord("spotwise", logging.WARNING, __file__, 1, rule.example, (), None)
    for journal in (False, True):
        line = OneLineFormatter(journal).format(record)
        assert rule.secret not in line


def _aws_error(message: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": "AuthFailure", "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": 401}},
        "RunInstances",
    )  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_provider_errors_are_masked(rule: masking.Rule) -> None:
    errors = [
        aws_translate(_aws_error(rule.example), what="run_instances"),
        gcp_translate(gexc.BadRequest(rule.example), what="instances.insert"),
        azure_translate(HttpResponseError(message=rule.example), what="virtual_machines"),
    ]
    for err in errors:
        assert rule.secret not in str(err), type(err).__name__
    assert rule.secret not in masking.mask_message(rule.example)


def test_known_secret_values_and_the_message_limit() -> None:
    text = "proxy echoed opaque-session-value back"
    assert "opaque-session-value" not in masking.mask(text, ["opaque-session-value"])
    assert masking.mask("a b", ["b"]) == "a b"  # too short to be told from ordinary words
    long = masking.mask_message("x" * 5000)
    assert len(long) == masking.MESSAGE_LIMIT + 3 and long.endswith("...")


def test_urls_alone_where_other_words_must_stay() -> None:
    url = "postgresql+psycopg://spot:s3cret/pw@db.example:5432/spotwise"
    assert redact_url(url) == "postgresql+psycopg://spot:***@db.example:5432/spotwise"
    assert mask_urls(f"database_url = '{url}'") == (
        "database_url = 'postgresql+psycopg://spot:***@db.example:5432/spotwise'"
    )
    echo = "spotwise.toml: database.password (line 3): required key is missing"
    assert mask_urls(echo) == echo
    assert masking.mask_url_passwords("sqlite:////var/lib/spotwise/spotwise.db") == (
        "sqlite:////var/lib/spotwise/spotwise.db"
    )


def test_the_shipped_rules_load_no_cloud_sdk() -> None:
    code = (
        "import sys\n"
        "from providers.masking import rules\n"
        "rules()\n"
        "sdks = ('boto3', 'botocore', 'google.cloud', 'google.api_core', 'azure.core')\n"
        "print(sorted(m for m in sys.modules if m.startswith(sdks)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
