"""Builds the configured provider adapters (the only place that knows every cloud package)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.core.clock import Clock, RealClock, ScaledClock
from scheduler.core.config import Config, local_settings
from scheduler.core.errors import UserError
from scheduler.core.read_settings import ReadSettings
from scheduler.state.market_clock import read_only_clock

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
    `read_only` (read commands): the market's epoch is read, never created
    (state.market_clock); before any market ran, market time starts now."""
    settings = ReadSettings.of_config(config)
    if read_only or settings.speedup == 1:
        return read_only_clock(settings)
    from providers.local.state import ensure_epoch

    local = config.providers.local
    assert local is not None  # a speed-up is the local market's
    state_dir = settings.local_state_dir
    try:
        epoch = ensure_epoch(state_dir, RealClock().now())
    except OSError as e:
        key = "providers.local.state_dir" if local.state_dir else "daemon.state_dir"
        raise UserError(f"{key}: {state_dir} is not usable: {e.strerror or e}") from None
    try:
        return ScaledClock(epoch, settings.speedup)
    except ValueError as e:
        raise UserError(f"providers.local.speedup: {e}") from None
