"""What every AWS resource module shares: the boto3 session and clients and typed error
translation, over the clock and event queue of every cloud's Api (providers/adapter.py). No
resource logic lives here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from providers.adapter import Clock, CloudApi
from providers.aws.errors import CAPACITY_CODES, QUOTA_CODES, translate
from providers.aws.settings import AwsSettings
from providers.base import ProviderError

log = logging.getLogger("spotwise.providers.aws")


class Api(CloudApi):
    """One account's session, clients per (service, region), and the events to drain."""

    def __init__(
        self, settings: AwsSettings, session: boto3.Session | None, clock: Clock | None
    ) -> None:
        super().__init__(clock, log)
        self.settings = settings
        try:
            self._session = session or boto3.Session(profile_name=settings.profile)
        except (BotoCoreError, ClientError) as exc:
            raise translate(exc, what="session") from None
        self._config = Config(
            retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
            connect_timeout=settings.connect_timeout.total_seconds(),
            read_timeout=settings.read_timeout.total_seconds(),
            user_agent_extra="spotwise",
        )
        self._clients: dict[tuple[str, str], Any] = {}

    def secrets(self) -> list[str]:
        try:
            creds = self._session.get_credentials()
            if creds is None:
                return []
            frozen = creds.get_frozen_credentials()
            return [s for s in (frozen.access_key, frozen.secret_key, frozen.token) if s]
        except Exception:  # resolving credentials must never mask the real error
            return []

    # -- clients ---------------------------------------------------------------------------
    def _client(self, service: str, region: str, endpoint_url: str | None) -> Any:
        with self._lock:  # boto3 sessions are not thread-safe; the clients they make are
            key = (service, region)
            if key not in self._clients:
                try:
                    self._clients[key] = self._session.client(
                        service, region_name=region, endpoint_url=endpoint_url, config=self._config
                    )
                except (BotoCoreError, ClientError) as exc:
                    raise translate(exc, what=f"{service} client", secrets=self.secrets) from None
            return self._clients[key]

    def ec2(self, region: str) -> Any:
        with self._lock:
            fresh = ("ec2", region) not in self._clients
            client = self._client("ec2", region, self.settings.endpoint_url)
            if fresh:
                client.meta.events.register_first(
                    "needs-retry.ec2.RunInstances", _capacity_is_an_answer
                )
            return client

    def pricing(self) -> Any:
        s = self.settings
        return self._client("pricing", s.pricing_region, s.pricing_endpoint_url)

    def sqs(self, region: str) -> Any:
        """The SQS client of one region (each region's interruption queue lives there)."""
        return self._client("sqs", region, self.settings.sqs_endpoint_url)

    def sts(self) -> Any:
        return self._client("sts", self.settings.regions[0], self.settings.sts_endpoint_url)

    def ssm(self, region: str) -> Any:
        return self._client("ssm", region, self.settings.ssm_endpoint_url)

    def call(
        self, what: str, fn: Callable[[], Any], pool: str | None = None, request: bool = False
    ) -> Any:
        """Run one API interaction; botocore failures come out as typed ProviderErrors."""
        try:
            return fn()
        except ProviderError:
            raise
        except (BotoCoreError, ClientError) as exc:
            raise translate(
                exc, what=what, pool=pool, secrets=self.secrets, request=request
            ) from None


def _capacity_is_an_answer(response: Any = None, **_: Any) -> None:
    """EC2 sends InsufficientInstanceCapacity as a 500, which botocore would retry with
    backoff; it is an answer about the pool, so the scheduler should move on at once.

    Runs just before botocore's retry handler and lowers the status it judges by.
    """
    if not response:
        return
    http, parsed = response
    code = (parsed or {}).get("Error", {}).get("Code")
    if code in CAPACITY_CODES or code in QUOTA_CODES:
        http.status_code = min(http.status_code, 400)


def paged(client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    out: list[Any] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        out.extend(page.get(key, []))
    return out
