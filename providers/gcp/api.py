"""What every GCP resource module shares: credentials, the compute and billing clients
(pointed at the configured endpoints), typed error translation, the clock and the events."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from google.api_core.client_options import ClientOptions

from providers.base import ProviderError, ProviderEvent
from providers.gcp.errors import translate
from providers.gcp.settings import GcpSettings
from providers.masking import mask_message

log = logging.getLogger("spotwise.providers.gcp")
CLOUD = "gcp"


class Clock(Protocol):
    def now(self) -> datetime: ...


class Api:
    """One project's credentials and clients, and the events to drain."""

    def __init__(
        self, settings: GcpSettings, credentials: Any = None, clock: Clock | None = None
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.RLock()
        self._events: deque[ProviderEvent] = deque(maxlen=1000)
        self._clients: dict[str, Any] = {}
        self._credentials = credentials
        if credentials is None and settings.credentials == "anonymous":
            from google.auth.credentials import AnonymousCredentials

            self._credentials = AnonymousCredentials()
            log.warning(
                "gcp: credentials = 'anonymous': requests are unauthenticated "
                "(meant for emulators and test fakes only)"
            )

    def now(self) -> datetime:
        return self._clock.now() if self._clock is not None else datetime.now(UTC)

    # -- events and secrets ----------------------------------------------------------------
    def emit(self, message: str, level: str = "warning") -> None:
        message = mask_message(message, self.secrets())
        log.warning("%s", message)
        with self._lock:
            self._events.append(ProviderEvent(message, level))

    def drain_events(self) -> list[ProviderEvent]:
        with self._lock:
            out = list(self._events)
            self._events.clear()
            return out

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
