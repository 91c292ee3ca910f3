"""GCP Compute Engine adapter: GPU offerings priced from the Cloud Billing Catalog, Spot
launches, observation through instances and zone operations.

Imports are lazy: reading the config loads the settings (pydantic) without the SDK, and a
read command that only needs the boot script's facts (userdata, startup) loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.gcp.provider import GcpProvider
    from providers.gcp.settings import GcpSettings

__all__ = ["GcpProvider", "GcpSettings"]


def __getattr__(name: str) -> Any:
    if name == "GcpSettings":
        from providers.gcp.settings import GcpSettings

        return GcpSettings
    if name == "GcpProvider":
        from providers.gcp.provider import GcpProvider

        return GcpProvider
    raise AttributeError(name)
