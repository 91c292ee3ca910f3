"""The `[providers.azure]` TOML section.

Credentials never live here: azure-identity's DefaultAzureCredential (environment, workload
or managed identity, Azure CLI login) supplies them. `credentials = "anonymous"` sends no
token at all, for local fakes only.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from providers.azure import ttl
from providers.settings import Duration, StrictModel

# Ubuntu 22.04 with NVIDIA drivers and CUDA (the Data Science VM's HPC image), as a URN.
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
PRICES_URL = "https://prices.azure.com/api/retail/prices"

# Each Azure cloud's Resource Manager and the authority its tokens come from
# (azure-identity's AzureAuthorityHosts; Azure Government's "Compare Azure Government and
# global Azure" and Azure China's "Azure China developer guide" endpoint tables). A
# sovereign cloud's token must be asked for its own ARM scope from its own authority: a
# base_url alone asks login.microsoftonline.com for a management.azure.com token, which
# the sovereign ARM refuses.
CLOUDS: dict[str, tuple[str, str]] = {
    "AzurePublicCloud": ("https://management.azure.com", "login.microsoftonline.com"),
    "AzureUSGovernment": ("https://management.usgovcloudapi.net", "login.microsoftonline.us"),
    "AzureChinaCloud": ("https://management.chinacloudapi.cn", "login.chinacloudapi.cn"),
}

_LOCATION = re.compile(r"^[a-z][a-z0-9]+$")
_GUID = re.compile(r"^[0-9a-fA-F-]{36}$")
_RG = re.compile(r"^[-\w._()]{1,90}$")


class AzureSettings(StrictModel):
    enabled: bool = True
    subscription_id: str
    resource_group: str  # every VM, NIC, disk and IP we create lives here
    locations: list[str] = Field(default_factory=lambda: ["eastus"], min_length=1)
    # Which Azure: its ARM endpoint, token scope and authority (CLOUDS).
    cloud: Literal["AzurePublicCloud", "AzureUSGovernment", "AzureChinaCloud"] = "AzurePublicCloud"
    base_url: str | None = None  # ARM root override (a proxy, a local fake); default: the cloud's
    prices_url: str = PRICES_URL  # the full Retail Prices endpoint
    credentials: Literal["default", "anonymous"] = "default"
    # A marketplace URN "publisher:offer:sku:version" or an image / gallery image resource id.
    image: str = DEFAULT_IMAGE
    os_disk_gb: int = Field(default=128, ge=30, le=4095)
    os_disk_type: Literal["Standard_LRS", "StandardSSD_LRS", "Premium_LRS"] = "StandardSSD_LRS"
    # The subnet resource id NICs are created in: one for all locations or one per location.
    subnet_id: str | dict[str, str] | None = None
    public_ip: bool = False  # a Standard public IP per VM (deleted with it)
    # "system" for a system-assigned identity, or a user-assigned identity's resource id.
    identity: str | None = None
    admin_username: str = "spotwise"
    ssh_public_key: str | None = None  # default: a throwaway key (no one can log in)
    # Allow-list of VM sizes; shell-style wildcards ("Standard_NC*_A100_v4"). Empty = all GPUs.
    vm_sizes: list[str] = Field(default_factory=list)
    # billingProfile.maxPrice for spot VMs: -1 = up to the on-demand price, never evicted
    # for price. A request tag `spotwise-max-price` overrides it per launch.
    spot_max_price: float = -1
    max_retries: int = Field(default=3, ge=0, le=20)  # azure-core retries (429, 5xx)
    retry_backoff: Duration = ttl.RETRY_BACKOFF
    connect_timeout: Duration = ttl.CONNECT_TIMEOUT
    read_timeout: Duration = ttl.READ_TIMEOUT
    polling_interval: Duration = ttl.LRO_POLL
    price_refresh: Duration = ttl.PRICE_REFRESH
    catalog_refresh: Duration = ttl.CATALOG_REFRESH

    @field_validator("vm_sizes", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("subscription_id")
    @classmethod
    def _sub(cls, v: str) -> str:
        if not _GUID.match(v):
            raise ValueError("subscription_id must be a subscription GUID")
        return v

    @field_validator("resource_group")
    @classmethod
    def _rg(cls, v: str) -> str:
        if not _RG.match(v):
            raise ValueError("not a resource group name")
        return v

    @field_validator("locations")
    @classmethod
    def _locations(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if not _LOCATION.match(x)]
        if bad:
            raise ValueError(f"not an Azure location name: {', '.join(bad)} (e.g. 'eastus')")
        if len(set(v)) != len(v):
            raise ValueError("locations are listed more than once")
        return v

    @field_validator("base_url", "prices_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/]+", v):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/") if v else v

    @model_validator(mode="after")
    def _subnets(self) -> AzureSettings:
        if isinstance(self.subnet_id, dict):
            missing = [x for x in self.locations if x not in self.subnet_id]
            if missing:
                raise ValueError(f"subnet_id: no subnet given for location(s) {', '.join(missing)}")
        return self

    @property
    def arm_url(self) -> str:
        """The Resource Manager root requests go to."""
        return self.base_url or CLOUDS[self.cloud][0]

    @property
    def credential_scope(self) -> str:
        """The scope tokens are asked for: the cloud's ARM audience, whatever base_url is."""
        return f"{CLOUDS[self.cloud][0]}/.default"

    @property
    def authority(self) -> str:
        return CLOUDS[self.cloud][1]

    def subnet_for(self, location: str) -> str | None:
        if isinstance(self.subnet_id, dict):
            return self.subnet_id.get(location)
        return self.subnet_id
