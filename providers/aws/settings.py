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
    # Optional: an SQS queue fed by an EventBridge rule for "EC2 Spot Instance Interruption
    # Warning" events; read on describe() to fill Instance.notice_at before the instance dies.
    sqs_queue_url: str | None = None
    sqs_region: str | None = None  # default: taken from the queue URL, else the first region
    sqs_endpoint_url: str | None = None

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

    def ami_for(self, region: str) -> str:
        return self.ami if isinstance(self.ami, str) else self.ami[region]
