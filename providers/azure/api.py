"""What every Azure module shares: the credential, the ARM clients and typed error
translation, over the clock and event queue of every cloud's Api (providers/adapter.py). No
resource logic lives here."""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.exceptions import AzureError
from azure.core.pipeline.policies import SansIOHTTPPolicy

from providers.adapter import Clock, CloudApi
from providers.azure.errors import translate
from providers.azure.settings import AzureSettings
from providers.base import FatalError, ProviderError
from providers.masking import mask_message

log = logging.getLogger("spotwise.providers.azure")


class _Anonymous:
    """A credential for local fakes: a placeholder token that is never sent (see _NoAuth)."""

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        return AccessToken("anonymous", int(time.time()) + 3600)


class _NoAuth(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Sends no Authorization header (credentials = "anonymous"); allowed over http."""


class _Recording:
    """Wraps the real credential and remembers the tokens it hands out, so every message we
    emit or raise can be masked. Never logs or prints anything."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._seen: deque[str] = deque(maxlen=8)

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        tok = self._inner.get_token(*scopes, **kwargs)
        self._seen.append(tok.token)
        return tok

    def secrets(self) -> list[str]:
        return list(self._seen)

    def __repr__(self) -> str:
        return "<credential>"


class Api(CloudApi):
    """One subscription's credential and ARM clients, and the events to drain."""

    def __init__(
        self,
        settings: AzureSettings,
        *,
        credential: Any = None,
        authentication_policy: Any = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(clock, log)
        self.settings = settings
        self._auth_policy = authentication_policy
        if credential is None and settings.credentials == "anonymous":
            log.warning('azure: credentials = "anonymous": no token is sent (local fakes only)')
            credential, self._auth_policy = _Anonymous(), authentication_policy or _NoAuth()
        if credential is not None and not isinstance(credential, _Recording):
            credential = _Recording(credential)
        self._credential: _Recording | None = credential
        self._compute: Any = None
        self._network: Any = None

    def secrets(self) -> list[str]:
        return self._credential.secrets() if self._credential is not None else []

    # -- clients ---------------------------------------------------------------------------
    def credential(self) -> Any:
        with self._lock:
            if self._credential is None:
                try:
                    from azure.identity import DefaultAzureCredential

                    # The configured cloud's authority (a sovereign cloud's tokens come
                    # from its own login endpoint).
                    self._credential = _Recording(
                        DefaultAzureCredential(authority=self.settings.authority)
                    )
                except Exception as exc:
                    raise FatalError(
                        f"azure credentials: {type(exc).__name__}: {mask_message(str(exc))}"
                    ) from None
            return self._credential

    def _kwargs(self) -> dict[str, Any]:
        s = self.settings
        kw: dict[str, Any] = {
            "polling_interval": s.polling_interval.total_seconds(),
            "retry_total": s.max_retries,
            "retry_backoff_factor": s.retry_backoff.total_seconds(),
            "connection_timeout": s.connect_timeout.total_seconds(),
            "read_timeout": s.read_timeout.total_seconds(),
            "user_agent": "spotwise",
        }
        kw["base_url"] = s.arm_url
        # The token's audience is the cloud's ARM, also when base_url points elsewhere.
        kw["credential_scopes"] = [s.credential_scope]
        if self._auth_policy is not None:
            kw["authentication_policy"] = self._auth_policy
        return kw

    def compute(self) -> Any:
        with self._lock:
            if self._compute is None:
                from azure.mgmt.compute import ComputeManagementClient

                self._compute = ComputeManagementClient(
                    self.credential(), self.settings.subscription_id, **self._kwargs()
                )
            return self._compute

    def network(self) -> Any:
        with self._lock:
            if self._network is None:
                from azure.mgmt.network import NetworkManagementClient

                self._network = NetworkManagementClient(
                    self.credential(), self.settings.subscription_id, **self._kwargs()
                )
            return self._network

    def call(
        self, what: str, fn: Callable[[], Any], pool: str | None = None, request: bool = False
    ) -> Any:
        """Run one API interaction; azure-core failures come out as typed ProviderErrors."""
        try:
            return fn()
        except ProviderError:
            raise
        except AzureError as exc:
            raise translate(
                exc, what=what, pool=pool, secrets=self.secrets(), request=request
            ) from None


class WireRead:
    """The JSON bodies of every HTTP response one SDK call made, read through azure-core's
    `raw_response_hook` (a per-call pipeline option every azure-mgmt operation passes on,
    paged ones once per page): what ARM sent, never the SDK's models. Their serialisation
    differs by SDK generation (msrest models in azure-mgmt-compute 33 to 37 give flattened
    snake_case from as_dict(), TypeSpec models in 38+ the wire form), so reading the models
    made a stopped Spot VM read as a pending on-demand one on the older SDKs."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, response: Any) -> None:
        http = response.http_response
        if not 200 <= int(getattr(http, "status_code", 0) or 0) < 300:
            return
        try:
            doc = json.loads(http.text() or "null")
        except ValueError:
            return
        if isinstance(doc, dict):
            self.bodies.append(doc)

    @property
    def last(self) -> dict[str, Any]:
        return self.bodies[-1] if self.bodies else {}

    def items(self) -> list[dict[str, Any]]:
        """The `value` rows of every page of a list call, in order."""
        return [row for page in self.bodies for row in page.get("value") or []]


def read_one(call: Callable[..., Any]) -> dict[str, Any]:
    """The wire body of a single-resource call `call(raw_response_hook=...)`."""
    got = WireRead()
    call(raw_response_hook=got)
    return got.last


def read_list(call: Callable[..., Any]) -> list[dict[str, Any]]:
    """The wire rows of a paged list call `call(raw_response_hook=...)`, every page."""
    got = WireRead()
    for _ in call(raw_response_hook=got):
        pass
    return got.items()


def body(doc: dict[str, Any]) -> bytes:
    """A request body as JSON bytes: both SDK generations send bytes as they are, so what
    goes on the wire is exactly `doc`, not a model's re-serialisation of it."""
    return json.dumps(doc).encode()
