"""Fixtures: one loopback GCP fake per test module (reset per test) and a provider on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers.gcp import GcpProvider
from providers.gcp.fake import FakeGcp
from tests.support.gcp_harness import settings


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeGcp]:
    fake = FakeGcp()
    yield fake
    fake.close()


@pytest.fixture
def fake(_server: FakeGcp) -> FakeGcp:
    _server.reset()
    return _server


@pytest.fixture
def provider(fake: FakeGcp) -> GcpProvider:
    return GcpProvider(settings(fake), owner="tests")
