"""What every GCP resource module shares: credentials, the compute and billing clients
(pointed at the configured endpoints) and typed error translation, over the clock and event
queue of every cloud's Api (providers/adapter.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from google.api_core.client_options import ClientOptions

from providers.adapter import Clock, CloudApi
from providers.base import ProviderError
from providers.gcp.errors import translate
from providers.gcp.settings import GcpSettings

log = logging.getLogger("spotwise.providers.gcp")
CLOUD = "gcp"


class Api(CloudApi):
    """One project's credentials and clients, and the events to drain."""

    def __init__(
        self, settings: GcpSettings, credentials: Any = None, clock: Clock | None = None
    ) -> None:
        super().__init__(clock, log)
        self.settings = settings
        self._clients: dict[str, Any] = {}
        self._credentials = credentials
        if credentials is None and settings.credentials == "anonymous":
            from google.auth.credentials import AnonymousCredentials

            self._credentials = AnonymousCredentials()
            log.warning(
                "gcp: credentials = 'anonymous': requests are unauthenticated "
                "(meant for emulators and test fakes only)"
            )

    def secrets(self) -> list[str]:
        """Values that must never appear in a message: the current OAuth token, if any."""
        creds = self._credentials
        out = []
        for attr in ("token", "_refresh_token", "refresh_token", "_client_secret"):
            v = getattr(creds, attr, None)
            if isinstance(v, str) and v:
                out.append(v)
        return out

    # -- credentials and clients -------------------------------------------------------------
    def credentials(self) -> Any:
        with self._lock:
            if self._credentials is None:
                import google.auth

                try:
                    self._credentials, _ = google.auth.default(
                        scopes=["https://www.googleapis.com/auth/cloud-platform"]
                    )
                except Exception as exc:  # DefaultCredentialsError and friends
                    raise translate(exc, what="application default credentials") from None
            return self._credentials

    def _client(self, key: str, factory: Callable[[], Any]) -> Any:
        with self._lock:
            if key not in self._clients:
                try:
                    self._clients[key] = factory()
                except ProviderError:
                    raise
                except Exception as exc:
                    raise translate(exc, what=f"{key} client", secrets=self.secrets()) from None
            return self._clients[key]

    def compute(self, name: str) -> Any:
        """A compute_v1 client by class name ("InstancesClient", "ZoneOperationsClient")."""

        def make() -> Any:
            from google.cloud import compute_v1

            opts = ClientOptions(api_endpoint=self.settings.api_endpoint)
            cls = getattr(compute_v1, name)
            return cls(credentials=self.credentials(), client_options=opts)

        return self._client(name, make)

    def billing(self) -> Any:
        def make() -> Any:
            from google.cloud import billing_v1

            opts = ClientOptions(api_endpoint=self.settings.billing_endpoint)
            # gRPC is the default transport; REST reaches emulators and plain-http fakes.
            return billing_v1.CloudCatalogClient(
                credentials=self.credentials(), client_options=opts, transport="rest"
            )

        return self._client("CloudCatalogClient", make)

    @property
    def timeout(self) -> float:
        return self.settings.timeout.total_seconds()

    def call(
        self, what: str, fn: Callable[[], Any], pool: str | None = None, request: bool = False
    ) -> Any:
        """Run one API interaction; failures come out as typed ProviderErrors."""
        try:
            return fn()
        except ProviderError:
            raise
        except Exception as exc:
            raise translate(
                exc, what=what, pool=pool, secrets=self.secrets(), request=request
            ) from None
