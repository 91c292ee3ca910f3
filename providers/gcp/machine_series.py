"""What each GPU machine series carries besides its GPUs, vCPUs and memory: the boot disk
types it accepts, the local SSD it bundles (billed apart from the machine), the family word
of its Core and Ram SKUs in the Billing Catalog, and whether a compact placement policy takes
it (gangs). One table per fact, each with its source.
"""

from __future__ import annotations

from providers.base import SettingRefused

DISK_TYPE_KEY = "[providers.gcp] disk_type"
AUTO = "auto"

# Boot disk types each series accepts (Compute Engine documentation, "Accelerator-optimized
# machine family" and "GPU machine types": supported disk types per series; A3 High/Mega do
# not take pd-standard, as SkyPilot's skypilot-org/skypilot#5351 records; A3 Ultra and A4
# are Hyperdisk-only, booting on hyperdisk-balanced, as nextflow-io/nextflow#6841 does for
# every Hyperdisk-only family). Longest prefix wins.
BOOT_DISK_TYPES: dict[str, tuple[str, ...]] = {
    "n1-": ("pd-balanced", "pd-ssd", "pd-standard", "pd-extreme"),
    "a2-": ("pd-balanced", "pd-ssd", "pd-standard"),
    "g2-": ("pd-balanced", "pd-ssd"),
    "a3-highgpu-": ("pd-balanced", "pd-ssd", "hyperdisk-balanced"),
    "a3-megagpu-": ("pd-balanced", "pd-ssd", "hyperdisk-balanced"),
    "a3-edgegpu-": ("pd-balanced", "pd-ssd", "hyperdisk-balanced"),
    "a3-ultragpu-": ("hyperdisk-balanced",),
    "a4-highgpu-": ("hyperdisk-balanced",),
    "a4x-highgpu-": ("hyperdisk-balanced",),
    "g4-": ("hyperdisk-balanced",),
}
# What `disk_type = "auto"` picks: the first of these the series accepts.
AUTO_ORDER = ("pd-balanced", "hyperdisk-balanced")

# Local SSD bundled with the machine type and billed on its own SKU, in GiB (375 GiB per
# disk): dstackai/gpuhunt, src/gpuhunt/providers/gcp.py `local_ssd_sizes_gib`, from
# cloud.google.com/compute/docs/disks/local-ssd#lssd_disks_fixed.
LOCAL_SSD_GIB: dict[str, int] = {
    "a2-ultragpu-1g": 1 * 375,
    "a2-ultragpu-2g": 2 * 375,
    "a2-ultragpu-4g": 4 * 375,
    "a2-ultragpu-8g": 8 * 375,
    "a3-highgpu-8g": 16 * 375,
    "a3-megagpu-8g": 16 * 375,
}

# The family word of a series' Core and Ram SKUs where it is not the first word of the
# machine type: A3 Mega is billed as "A3Plus Instance Core/Ram" (gpuhunt maps
# "A3Plus Instance" to a3-megagpu), A3 Ultra as "A3Ultra Instance ...".
PRICE_FAMILY: dict[str, str] = {
    "a3-megagpu-": "A3PLUS",
    "a3-ultragpu-": "A3ULTRA",
}


# Series a compact placement policy takes (GPU machines): "Compact placement policy and
# workload policy overview" (cloud.google.com AI Hypercomputer documentation, supported
# machine types: A4X Max, A4X, A4, A3 Ultra, A3 Mega, A3 High, A3 Edge, A2, G4, G2). N1 with
# attached GPUs is not among them: its gangs are bulk-inserted without one.
COMPACT_PLACEMENT = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")


def takes_compact_placement(machine: str) -> bool:
    return machine.startswith(COMPACT_PLACEMENT)


def _series(machine: str, table: dict[str, object]) -> str | None:
    hits = [p for p in table if machine.startswith(p)]
    return max(hits, key=len) if hits else None


def price_family(machine: str) -> str:
    """'A3PLUS' for a3-megagpu-8g, 'A2' for a2-highgpu-1g: the word its SKUs carry."""
    prefix = _series(machine, PRICE_FAMILY)  # type: ignore[arg-type]
    return PRICE_FAMILY[prefix] if prefix else machine.split("-", 1)[0].upper()


def accepted_disks(machine: str) -> tuple[str, ...] | None:
    """The boot disk types `machine` accepts; None for a series this table does not know."""
    prefix = _series(machine, BOOT_DISK_TYPES)  # type: ignore[arg-type]
    return BOOT_DISK_TYPES[prefix] if prefix else None


def boot_disk_type(machine: str, configured: str) -> str:
    """The boot disk type to create for `machine`: the configured one, or for "auto" the first
    of AUTO_ORDER the series takes. A configured type the series refuses is the operator's
    setting, named by its key (SettingRefused), never a dead pool."""
    accepted = accepted_disks(machine)
    if configured == AUTO:
        if accepted is None:
            return AUTO_ORDER[0]
        return next((d for d in AUTO_ORDER if d in accepted), accepted[0])
    if accepted is not None and configured not in accepted:
        raise SettingRefused(
            f"gcp launch: {machine} does not boot from a {configured} disk (it takes "
            f'{", ".join(accepted)}); set {DISK_TYPE_KEY} = "auto" or one of those',
            DISK_TYPE_KEY,
        )
    return configured


def local_ssd_gib(machine: str) -> int:
    return LOCAL_SSD_GIB.get(machine, 0)
