"""The `[providers.gcp]` TOML section.

Credentials never live here: Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
gcloud's ADC file, or the metadata server) supply them. `credentials = "anonymous"` is for
emulators and test fakes only (the adapter logs a warning when it is used).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from providers.gcp import ttl
from providers.settings import Duration, StrictModel

# A public Deep Learning VM image family with CUDA; its NVIDIA driver is installed at first
# boot when the VM's metadata says install-nvidia-driver=True (the adapter sets it on every
# GPU VM, as SkyPilot's sky/templates/gcp-ray.yml.j2 does). Current DLVM families carry a
# Python (-py310) or driver (-nvidia-570) suffix; this one is in public use by that name
# (e.g. GoogleCloudPlatform deployments pinning .../family/common-cu128-ubuntu-2204-nvidia-570).
# Checked against recorded use only: `spotwise doctor` resolves it in the user's project.
DEFAULT_IMAGE = (
    "projects/deeplearning-platform-release/global/images/family/"
    "common-cu128-ubuntu-2204-nvidia-570"
)
DEFAULT_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]

_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")


class GcpSettings(StrictModel):
    enabled: bool = True
    project: str = Field(min_length=1)
    regions: list[str] = Field(default_factory=lambda: ["us-central1"], min_length=1)
    # Optional: only these zones (each inside one of `regions`); empty = every zone.
    zones: list[str] = Field(default_factory=list)
    # Endpoint overrides (emulators, Private Service Connect, test fakes); http:// allowed.
    api_endpoint: str | None = None
    billing_endpoint: str | None = None
    resource_manager_endpoint: str | None = None  # projects.testIamPermissions (doctor)
    # The project user credentials (ADC from `gcloud auth application-default login`) bill
    # their API quota to; the Billing Catalog refuses user credentials without one.
    # Default: the credentials' own quota project, else `project`.
    quota_project: str | None = None
    credentials: Literal["adc", "anonymous"] = "adc"
    image: str = DEFAULT_IMAGE
    disk_size_gb: int = Field(default=200, ge=10, le=65536)
    # "auto": pd-balanced where the machine series takes it, else hyperdisk-balanced (A3
    # Ultra, A4 and G4 boot only from Hyperdisk); a named type the series refuses is an error
    # naming this key. See providers/gcp/machine_series.py.
    disk_type: str = "auto"
    network: str = "global/networks/default"
    # One subnetwork for all regions, or one per region ("regions/R/subnetworks/S").
    subnetwork: str | dict[str, str] | None = None
    external_ip: bool = True
    service_account: str | None = None  # an email; None = the project's default one
    scopes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCOPES))
    # Allow-list of machine types, shell-style wildcards ("a2-*", "n1-standard-8"); empty = all.
    machine_types: list[str] = Field(default_factory=list)
    # Optional DWS flex-start: on-demand launches become FLEX_START VMs with this maximum run
    # duration (GCE deletes them when it is up; at most 7 days). Their insert operation waits
    # for capacity, so a launch stays PENDING until GCE finds some or gives up (then describe
    # reports LAUNCH_FAILED/CAPACITY). Priced at the on-demand SKUs (an upper bound: flex-start
    # SKUs are discounted). None: plain on-demand.
    flex_start_max_run: Duration | None = None
    # Spot VMs: how long before the soft-off the metadata server says "preempted"
    # (scheduling.preemptionNoticeDuration); 0 asks for none (the 30 s window only).
    preemption_notice: Duration = ttl.PREEMPTION_NOTICE
    price_refresh: Duration = ttl.PRICE_REFRESH
    catalog_refresh: Duration = ttl.CATALOG_REFRESH
    timeout: Duration = ttl.REQUEST_TIMEOUT

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if not _REGION.match(r)]
        if bad:
            raise ValueError(f"not a GCP region name: {', '.join(bad)} (e.g. 'us-central1')")
        if len(set(v)) != len(v):
            raise ValueError("regions are listed more than once")
        return v

    @field_validator("zones", "machine_types", "scopes", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("api_endpoint", "billing_endpoint", "resource_manager_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("an endpoint must start with http:// or https://")
        return v.rstrip("/") if v else v

    @model_validator(mode="after")
    def _zones_in_regions(self) -> GcpSettings:
        for z in self.zones:
            if not _ZONE.match(z) or z.rsplit("-", 1)[0] not in self.regions:
                raise ValueError(f"zone {z!r} is not a zone of the configured regions")
        run = self.flex_start_max_run
        if run is not None and not 600 <= run.total_seconds() <= 7 * 86400:
            raise ValueError("flex_start_max_run must be between 10m and 7d")
        if self.preemption_notice.total_seconds() < 0:
            raise ValueError("preemption_notice must be 0 (none) or more")
        if isinstance(self.subnetwork, dict):
            missing = [r for r in self.regions if r not in self.subnetwork]
            if missing:
                raise ValueError(f"subnetwork: none given for region(s) {', '.join(missing)}")
        return self

    def subnetwork_for(self, region: str) -> str | None:
        if isinstance(self.subnetwork, dict):
            return self.subnetwork[region]
        return self.subnetwork


def region_of_zone(zone: str) -> str:
    """us-central1-a -> us-central1."""
    return zone.rsplit("-", 1)[0]
