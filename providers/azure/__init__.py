"""Azure adapter: GPU offerings with Retail spot prices, Spot VM launch, eviction observation."""

from providers.azure.settings import AzureSettings

__all__ = ["AzureProvider", "AzureSettings"]


def __getattr__(name: str) -> object:
    # Imported lazily so reading the config does not pull in the Azure SDKs.
    if name == "AzureProvider":
        from providers.azure.provider import AzureProvider

        return AzureProvider
    raise AttributeError(name)
