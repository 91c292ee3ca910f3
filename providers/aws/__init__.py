"""AWS EC2 adapter: GPU offerings with live spot prices, spot/on-demand launch, observation."""

from providers.aws.settings import AwsSettings

__all__ = ["AwsProvider", "AwsSettings"]


def __getattr__(name: str) -> object:
    # Imported lazily so reading the config does not pull in boto3.
    if name == "AwsProvider":
        from providers.aws.provider import AwsProvider

        return AwsProvider
    raise AttributeError(name)
