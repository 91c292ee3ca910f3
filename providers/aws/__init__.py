"""AWS EC2 adapter: GPU offerings with live spot prices, spot/on-demand launch, observation.

Imports are lazy: reading the config loads the settings (pydantic) without the SDK, and a
read command that only needs the boot script's facts (userdata, startup) loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.aws.provider import AwsProvider
    from providers.aws.settings import AwsSettings

__all__ = ["AwsProvider", "AwsSettings"]


def __getattr__(name: str) -> Any:
    if name == "AwsSettings":
        from providers.aws.settings import AwsSettings

        return AwsSettings
    if name == "AwsProvider":
        from providers.aws.provider import AwsProvider

        return AwsProvider
    raise AttributeError(name)
