"""Fixtures: the loopback ARM and Retail Prices fakes (shared per process), a provider per
test in its own resource group."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from providers.azure import AzureProvider
from providers.azure.fake_arm import FakeArm
from providers.azure.fake_prices import FakePrices
from providers.base import TAG_ATTEMPT, TAG_JOB, TAG_OWNER, LaunchRequest, Offering
from tests.support.azure_harness import fakes, settings_for, t4_offering

OWNER = "az-test"


@pytest.fixture
def arm() -> Iterator[FakeArm]:
    a, _ = fakes()
    a.reset_answers()
    yield a
    a.reset_answers()


@pytest.fixture
def prices() -> Iterator[FakePrices]:
    _, p = fakes()
    p.throttle, p.fail = 0, False
    yield p
    p.throttle, p.fail = 0, False


@pytest.fixture
def rg() -> str:
    return "rg-" + uuid.uuid4().hex[:10]


@pytest.fixture
def make(arm: FakeArm, prices: FakePrices, rg: str):  # type: ignore[no-untyped-def]
    def build(**extra: Any) -> AzureProvider:
        kw = {k: extra.pop(k) for k in ("credential", "authentication_policy") if k in extra}
        return AzureProvider(settings_for(arm, prices, rg, **extra), owner=OWNER, **kw)

    return build


@pytest.fixture
def provider(make) -> AzureProvider:  # type: ignore[no-untyped-def]
    return make()


def request_for(
    offering: Offering | None = None, token: str | None = None, **changes: Any
) -> LaunchRequest:
    token = token or "tok-" + uuid.uuid4().hex[:8]
    fields: dict[str, Any] = {
        "token": token,
        "offering": offering or t4_offering(),
        "command": ["python3", "train.py", "--epochs", "3"],
        "env": {"SPOTWISE_JOB_ID": "j1", "SPOTWISE_ATTEMPT": "2",
                "SPOTWISE_CHECKPOINT_URI": "s3://bucket/j1"},
        "tags": {TAG_JOB: "j1", TAG_ATTEMPT: "j1-2", TAG_OWNER: OWNER},
    }  # fmt: skip
    fields.update(changes)
    return LaunchRequest(**fields)
