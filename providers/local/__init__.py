"""The embedded default market: local processes, prices and interruptions replayed from a trace.

Imports are lazy so the per-instance supervisor (`python -m providers.local.supervisor`) starts
without loading pydantic or the provider contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.local.market import LocalMarket
    from providers.local.settings import LocalSettings

__all__ = ["LocalMarket", "LocalSettings"]


def __getattr__(name: str) -> Any:
    if name == "LocalMarket":
        from providers.local.market import LocalMarket

        return LocalMarket
    if name == "LocalSettings":
        from providers.local.settings import LocalSettings

        return LocalSettings
    raise AttributeError(name)
