"""Builds the configured provider adapters (the only place that knows every cloud package)."""

from __future__ import annotations

from providers.base import Provider
from scheduler.config import Config


def build_providers(config: Config) -> dict[str, Provider]:
    """One adapter per configured section; imports are lazy so unused SDKs cost nothing."""
    out: dict[str, Provider] = {}
    p = config.providers
    if p.local is not None:
        from providers.local.market import LocalMarket

        out["local"] = LocalMarket(p.local)
    if p.aws is not None and getattr(p.aws, "enabled", True):
        from providers.aws import AwsProvider

        out["aws"] = AwsProvider(p.aws, owner=config.daemon.owner)
    return out
