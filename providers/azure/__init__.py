"""Azure adapter: GPU offerings with Retail spot prices, Spot VM launch, eviction observation.

Imports are lazy: reading the config loads the settings (pydantic) without the SDK, and a
read command that only needs the boot script's facts (userdata, startup) loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.azure.provider import AzureProvider
    from providers.azure.settings import AzureSettings

__all__ = ["AzureProvider", "AzureSettings"]


def __getattr__(name: str) -> Any:
    if name == "AzureSettings":
        from providers.azure.settings import AzureSettings

        return AzureSettings
    if name == "AzureProvider":
        from providers.azure.provider import AzureProvider

        return AzureProvider
    raise AttributeError(name)
