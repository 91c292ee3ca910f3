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
RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com"


def with_quota_project(credentials: Any, settings: GcpSettings) -> Any:
    """User credentials (ADC from `gcloud auth application-default login`) bill API quota to
    a quota project, which the Billing Catalog requires ("... requires a quota project,
    which is not set by default"); the generated clients apply ClientOptions'
    quota_project_id only to credentials they find themselves, so it is set here: the
    configured `quota_project`, else the credentials' own, else `project`. Service account
    credentials get one only when `quota_project` is configured (their own project pays)."""
    if not hasattr(credentials, "with_quota_project"):
        return credentials
    wanted = settings.quota_project
    if (
        wanted is None
        and _is_user(credentials)
        and not getattr(credentials, "quota_project_id", None)
    ):
        wanted = settings.project
    return credentials.with_quota_project(wanted) if wanted else credentials


def _is_user(credentials: Any) -> bool:
    try:
        from google.oauth2.credentials import Credentials as UserCredentials
    except ImportError:  # pragma: no cover - google-auth always has it
        return False
    return isinstance(credentials, UserCredentials)


class Api(CloudApi):
    """One project's credentials and clients, and the events to drain."""

    def __init__(
        self, settings: GcpSettings, credentials: Any = None, clock: Clock | None = None
    ) -> None:
        super().__init__(clock, log)
        self.settings = settings
        self._clients: dict[str, Any] = {}
        self._credentials = credentials
        self._quota_set = False
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
            if not self._quota_set:
                self._credentials = with_quota_project(self._credentials, self.settings)
                self._quota_set = True
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

    def resource_manager(self) -> Any:
        """An authorized HTTP session for the Resource Manager API (testIamPermissions)."""

        def make() -> Any:
            from google.auth.transport.requests import AuthorizedSession

            return AuthorizedSession(self.credentials())

        return self._client("AuthorizedSession", make)

    @property
    def resource_manager_url(self) -> str:
        return self.settings.resource_manager_endpoint or RESOURCE_MANAGER

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
