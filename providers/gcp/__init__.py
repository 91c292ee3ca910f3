"""GCP Compute Engine adapter: GPU offerings priced from the Cloud Billing Catalog, Spot
launches, observation through instances and zone operations."""

from providers.gcp.settings import GcpSettings

__all__ = ["GcpProvider", "GcpSettings"]


def __getattr__(name: str) -> object:
    # Imported lazily so reading the config does not pull in google-cloud-compute.
    if name == "GcpProvider":
        from providers.gcp.provider import GcpProvider

        return GcpProvider
    raise AttributeError(name)
