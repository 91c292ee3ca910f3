"""The regions each cloud has, for checking a job's `regions` (and a "did you mean").

Every region of the shipped catalogs (scheduler/lab/bench_data/data, providers/local/data) plus
AWS's public commercial regions (the shipped AWS catalog is a subset). A region a job names
that is not here can never be placed, so it is refused at load.
"""

from __future__ import annotations

import difflib

CLOUDS = ("aws", "gcp", "azure")

REGIONS: dict[str, frozenset[str]] = {
    "aws": frozenset({
    "af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3",
    "ap-south-1", "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3",
    "ap-southeast-4", "ap-southeast-5", "ap-southeast-7", "ca-central-1", "ca-west-1",
    "eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1",
    "eu-west-2", "eu-west-3", "il-central-1", "me-central-1", "me-south-1", "mx-central-1",
    "sa-east-1", "us-east-1", "us-east-2", "us-west-1", "us-west-2",
    }),
    "gcp": frozenset({
    "africa-south1", "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2",
    "asia-northeast3", "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
    "asia-southeast3", "australia-southeast1", "australia-southeast2", "europe-central2",
    "europe-north1", "europe-north2", "europe-southwest1", "europe-west1", "europe-west10",
    "europe-west12", "europe-west2", "europe-west3", "europe-west4", "europe-west6",
    "europe-west8", "europe-west9", "me-central1", "me-central2", "me-west1",
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
    "southamerica-east1", "southamerica-west1", "us-central1", "us-central2", "us-east1",
    "us-east4", "us-east5", "us-south1", "us-west1", "us-west2", "us-west3", "us-west4",
    }),
    "azure": frozenset({
    "australiacentral", "australiacentral2", "australiaeast", "australiasoutheast", "austriaeast",
    "belgiumcentral", "brazilsouth", "brazilsoutheast", "canadacentral", "canadaeast",
    "centralindia", "centralus", "chilecentral", "denmarkeast", "eastasia", "eastus", "eastus2",
    "francecentral", "francesouth", "germanynorth", "germanywestcentral", "indonesiacentral",
    "israelcentral", "italynorth", "japaneast", "japanwest", "jioindiacentral", "jioindiawest",
    "koreacentral", "koreasouth", "malaysiawest", "mexicocentral", "newzealandnorth",
    "northcentralus", "northeurope", "norwayeast", "norwaywest", "polandcentral", "qatarcentral",
    "southafricanorth", "southafricawest", "southcentralus", "southeastasia", "southindia",
    "spaincentral", "swedencentral", "switzerlandnorth", "switzerlandwest", "uaecentral",
    "uaenorth", "uksouth", "ukwest", "westcentralus", "westeurope", "westindia", "westus",
    "westus2", "westus3",
    }),
}  # fmt: skip


def cloud_of(region: str) -> str | None:
    for cloud, names in REGIONS.items():
        if region in names:
            return cloud
    return None


def suggest_region(region: str, clouds: list[str] | None = None) -> str | None:
    """A close region name ('us-east1a' -> 'us-east-1'), or a zone's region ('us-east-1a')."""
    pool = sorted(set().union(*(REGIONS[c] for c in (clouds or CLOUDS) if c in REGIONS)))
    for name in pool:  # a zone: its region is a prefix of it
        if region.startswith(name) and len(region) - len(name) <= 12:
            return name
    hits = difflib.get_close_matches(region, pool, n=1, cutoff=0.75)
    return hits[0] if hits else None


def suggest_cloud(cloud: str) -> str | None:
    hits = difflib.get_close_matches(cloud, CLOUDS, n=1, cutoff=0.5)
    return hits[0] if hits else None
