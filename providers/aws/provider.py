"""AwsProvider: the Provider protocol over EC2, the Pricing API and (optionally) SQS.

A thin composition, Karpenter-style, of one module per resource: offerings.py (types,
zones, prices), network.py (subnets, security groups), instances.py (launch, describe,
terminate, list, find), with every cache lifetime and timeout in ttl.py; the Provider methods
forward to them through providers/adapter.py. It makes no decisions and keeps nothing that a
restart could lose: resources are found again from the refs the scheduler persists and from
EC2's tags.
"""

from __future__ import annotations

from collections.abc import Sequence

import boto3

from providers.adapter import Clock, CloudAdapter
from providers.aws import ttl
from providers.aws.api import Api
from providers.aws.instances import MAX_GANG, TAG_TOKEN, Instances, client_token
from providers.aws.network import Networks
from providers.aws.notices import InterruptionNotices
from providers.aws.offerings import Offerings
from providers.aws.pricing import OnDemandPrices
from providers.aws.risk import PlacementScores
from providers.aws.settings import AwsSettings
from providers.base import Capabilities, Offering, RiskSignal
from providers.preflight import Check

__all__ = ["TAG_TOKEN", "AwsProvider", "client_token"]

CAPABILITIES = Capabilities(
    # EC2 tags: keys up to 128 and values up to 256 characters, any printable character.
    label_max_length=256,
    label_pattern=r"[^\x00-\x1f\x7f-\x9f]",
    lowercase_labels=False,
    idempotency_window=ttl.IDEMPOTENCY_WINDOW,
    visibility_delay=ttl.VISIBILITY_DELAY,
    # RunInstances answers capacity, quota and validation errors synchronously.
    launch_completes_later=False,
    # MinCount=MaxCount=N: the whole gang or nothing, in one request with one ClientToken.
    max_count=MAX_GANG,
    placement_groups=True,
    # Volumes whose DeleteOnTermination is off outlive the instance; list_tagged shows them.
    leaves_resources=True,
    notice_window=ttl.NOTICE_WINDOW,
)


class AwsProvider(CloudAdapter):
    """One AWS account across the configured regions."""

    name = "aws"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: AwsSettings,
        *,
        owner: str = "spotwise",
        session: boto3.Session | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        api = Api(settings, session, clock)
        networks = Networks(api)
        ondemand = OnDemandPrices(
            api.pricing,
            ttl=settings.catalog_refresh,
            retry_after=settings.price_refresh,
            emit=api.emit,
            secrets=api.secrets,
        )
        queues = settings.queues()
        notices = InterruptionNotices(api.sqs, queues) if queues else None
        super().__init__(
            api, Offerings(api, networks, ondemand), Instances(api, networks, owner, notices)
        )
        self._scores = PlacementScores(api.ec2, api.now, api.emit)

    def risk_signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        """Spot placement scores for these offerings' zones (risk.py: cached, rate-kept)."""
        return self._scores.signals(offerings)

    def preflight(self) -> list[Check]:
        """`spotwise doctor`: this account checked before the first job (preflight.py)."""
        from providers.aws.preflight import preflight

        return preflight(self)
