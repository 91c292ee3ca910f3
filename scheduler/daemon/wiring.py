"""Builds the configured provider adapters (the only place that knows every cloud package)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.core.clock import Clock, RealClock, ScaledClock
from scheduler.core.config import Config, local_settings
from scheduler.core.errors import UserError

if TYPE_CHECKING:  # the read commands take the clock without any provider's code
    from providers.base import Provider


def observe_only(config: Config) -> frozenset[str]:
    """The clouds configured with `enabled = false`: the daemon places nothing new there,
    and keeps watching, stopping and billing what already runs there."""
    p = config.providers
    return frozenset(
        name
        for name in ("aws", "gcp", "azure")
        if (s := getattr(p, name)) is not None and not getattr(s, "enabled", True)
    )


def build_providers(
    config: Config, *, read_only: bool = False, include_disabled: bool = False
) -> dict[str, Provider]:
    """One adapter per configured section; imports are lazy so unused SDKs cost nothing.
    `read_only` (read commands): the local market creates nothing in its state directory.
    `include_disabled` (the daemon): `enabled = false` clouds too, observe-only there."""
    out: dict[str, Provider] = {}
    p = config.providers
    if p.local is not None:
        from providers.local.market import LocalMarket

        out["local"] = LocalMarket(
            local_settings(config),
            clock=clock_for(config, read_only=read_only),
            read_only=read_only,
        )
    if p.aws is not None and (include_disabled or getattr(p.aws, "enabled", True)):
        from providers.aws.provider import AwsProvider

        out["aws"] = AwsProvider(p.aws, owner=config.daemon.owner)
    if p.azure is not None and (include_disabled or p.azure.enabled):
        from providers.azure.provider import AzureProvider

        out["azure"] = AzureProvider(p.azure, owner=config.daemon.owner)
    if p.gcp is not None and (include_disabled or p.gcp.enabled):
        from providers.gcp.provider import GcpProvider

        out["gcp"] = GcpProvider(p.gcp, owner=config.daemon.owner)
    return out


def clock_for(config: Config, *, read_only: bool = False) -> Clock:
    """The daemon's and CLI's clock: the local market's sped-up time when it is the only
    provider (so its spend and budgets are in market hours), real time otherwise.
    `read_only` (read commands): the market's epoch is read, never created; before any
    market ran, market time starts now."""
    p = config.providers
    local = p.local
    clouds = (p.aws, p.gcp, p.azure)
    if local is None or any(c is not None for c in clouds) or local.speedup == 1:
        return RealClock()
    from providers.local.state import ensure_epoch, read_epoch

    state_dir, now = local_settings(config).resolved_state_dir(), RealClock().now()
    if read_only:
        epoch = read_epoch(state_dir) or now
    else:
        try:
            epoch = ensure_epoch(state_dir, now)
        except OSError as e:
            key = "providers.local.state_dir" if local.state_dir else "daemon.state_dir"
            raise UserError(f"{key}: {state_dir} is not usable: {e.strerror or e}") from None
    try:
        return ScaledClock(epoch, local.speedup)
    except ValueError as e:
        raise UserError(f"providers.local.speedup: {e}") from None
