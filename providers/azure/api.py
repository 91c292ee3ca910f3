"""What every Azure module shares: the credential, the ARM clients and typed error
translation, over the clock and event queue of every cloud's Api (providers/adapter.py). No
resource logic lives here."""

from __future__ import annotations

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

                    self._credential = _Recording(DefaultAzureCredential())
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
        if s.base_url:
            kw["base_url"] = s.base_url
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


def wire(obj: Any) -> dict[str, Any]:
    """A TypeSpec model (or a plain dict) as its JSON wire form."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    return dict(obj.as_dict())
