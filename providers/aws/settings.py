"""The `[providers.aws]` TOML section.

Credentials never live here: boto3's standard chain (env, shared profile, SSO, instance or
task role) supplies them, so a config file can be shared or committed without leaking keys.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from providers.aws import ttl
from providers.settings import Duration, StrictModel

# The Deep Learning Base AMI (NVIDIA driver, CUDA, Docker) through its public SSM parameter:
# EC2 resolves `resolve:ssm:` ImageIds in every region, so one value works everywhere.
DEFAULT_AMI = (
    "resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
    "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")


class AwsSettings(StrictModel):
    enabled: bool = True
    regions: list[str] = Field(default_factory=lambda: ["us-east-1"], min_length=1)
    profile: str | None = None  # a named profile of the shared config; keys stay in ~/.aws
    endpoint_url: str | None = None  # EC2 endpoint override (moto, VPC endpoint, proxy)
    pricing_endpoint_url: str | None = None
    pricing_region: Literal["us-east-1", "eu-central-1", "ap-south-1"] = "us-east-1"
    # One AMI for all regions (an id or `resolve:ssm:<parameter>`), or one per region.
    ami: str | dict[str, str] = DEFAULT_AMI
    # Subnets to launch into (any regions/zones). When set, only zones that have one of them
    # are offered; when empty, the default VPC of each region is used.
    subnet_ids: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("subnet_ids", "subnet_id")
    )
    # Security groups; each launch uses the ones that exist in its region.
    security_group_ids: list[str] = Field(default_factory=list)
    instance_profile: str | None = None  # a name or an ARN
    key_name: str | None = None
    # Allow-list of instance types; shell-style wildcards ("g5.*") allowed. Empty = every GPU type.
    instance_types: list[str] = Field(default_factory=list)
    # The CPU architectures the AMI runs on (arm64 GPU types need an arm64 AMI).
    architectures: list[Literal["x86_64", "arm64"]] = Field(default_factory=lambda: ["x86_64"])  # type: ignore[arg-type]
    retry_mode: Literal["standard", "adaptive", "legacy"] = "standard"
    max_attempts: int = Field(default=5, ge=1, le=20)  # per API call, the first one included
    connect_timeout: Duration = ttl.CONNECT_TIMEOUT
    read_timeout: Duration = ttl.READ_TIMEOUT
    price_refresh: Duration = ttl.PRICE_REFRESH  # spot prices, zones and the offering cache
    catalog_refresh: Duration = ttl.CATALOG_REFRESH  # instance types and on-demand list prices
    # Optional: SQS queues fed by EventBridge rules for "EC2 Spot Instance Interruption
    # Warning" events; read on describe() to fill Instance.notice_at before the instance
    # dies. EventBridge delivers only to a queue in the rule's own region, so each region
    # needs its own queue: a table { us-east-1 = "https://sqs...", ... }. A single URL is
    # the queue of the region it names (or `sqs_region`).
    sqs_queue_url: str | dict[str, str] | None = None
    sqs_region: str | None = None  # a single URL's region when the URL does not name one
    sqs_endpoint_url: str | None = None
    ssm_endpoint_url: str | None = None  # resolving `resolve:ssm:` AMIs (`spotwise doctor`)
    sts_endpoint_url: str | None = None  # the caller's identity (`spotwise doctor`)

    @field_validator("subnet_ids", "security_group_ids", "instance_types", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if not _REGION.match(r)]
        if bad:
            raise ValueError(f"not an AWS region name: {', '.join(bad)} (e.g. 'us-east-1')")
        if len(set(v)) != len(v):
            raise ValueError("regions are listed more than once")
        return v

    @model_validator(mode="after")
    def _ami_per_region(self) -> AwsSettings:
        if isinstance(self.ami, dict):
            missing = [r for r in self.regions if r not in self.ami]
            if missing:
                raise ValueError(f"ami: no AMI given for region(s) {', '.join(missing)}")
        return self

    @model_validator(mode="after")
    def _queues_in_regions(self) -> AwsSettings:
        if isinstance(self.sqs_queue_url, dict):
            extra = [r for r in self.sqs_queue_url if r not in self.regions]
            if extra:
                raise ValueError(
                    f"sqs_queue_url: {', '.join(extra)} is not one of the configured regions"
                )
        return self

    def queues(self) -> dict[str, str]:
        """region -> the interruption queue EventBridge fills there."""
        from providers.aws.notices import queue_region

        if isinstance(self.sqs_queue_url, dict):
            return dict(self.sqs_queue_url)
        if not self.sqs_queue_url:
            return {}
        region = queue_region(self.sqs_queue_url) or self.sqs_region or self.regions[0]
        return {region: self.sqs_queue_url}

    def ami_for(self, region: str) -> str:
        return self.ami if isinstance(self.ami, str) else self.ami[region]
