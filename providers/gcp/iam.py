"""What IAM must allow for each Compute Engine call the adapter makes, so the custom role the
README ships (iam-role.json) can be checked against the calls the code really makes, and
`spotwise doctor` can ask testIamPermissions for exactly these.

The permissions of each method are Compute Engine's API reference ("IAM Permissions" of
instances.insert, .bulkInsert, .setLabels, .get, .list, .aggregatedList, .delete,
resourcePolicies.insert, .list and .delete, zoneOperations.list and .get,
machineTypes and acceleratorTypes .aggregatedList, images.getFromFamily, advice.capacity
and advice.capacityHistory: compute.advice.capacity and compute.advice.capacityHistory, both
in roles/compute.viewer) and of "Create a VM
instance" (what a request body adds: metadata -> compute.instances.setMetadata, labels ->
setLabels, a service account -> setServiceAccount and iam.serviceAccounts.actAs, a new boot
disk -> compute.disks.create, a subnetwork or network -> compute.subnetworks.use, an
external IP -> compute.subnetworks.useExternalIp, an image -> compute.images.useReadOnly,
a resource policy -> compute.resourcePolicies.use; a bulkInsert's instanceProperties add
the same).
The Billing Catalog needs no role; with user credentials its quota project needs
serviceusage.services.use (Service Usage, "Quota project"). Pure data and functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# (method, path pattern) -> permissions; paths as the REST API has them.
_CALLS: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (m, re.compile(p), perms)
    for m, p, perms in (
        ("POST", r"/zones/[^/]+/instances$", ("compute.instances.create",)),
        ("POST", r"/zones/[^/]+/instances/bulkInsert$", ("compute.instances.create",)),
        ("POST", r"/zones/[^/]+/instances/[^/]+/setLabels$", ("compute.instances.setLabels",)),
        ("POST", r"/regions/[^/]+/resourcePolicies$", ("compute.resourcePolicies.create",)),
        ("GET", r"/regions/[^/]+/resourcePolicies$", ("compute.resourcePolicies.list",)),
        ("DELETE", r"/regions/[^/]+/resourcePolicies/[^/]+$", ("compute.resourcePolicies.delete",)),
        ("GET", r"/zones/[^/]+/instances$", ("compute.instances.list",)),
        ("GET", r"/zones/[^/]+/instances/[^/]+$", ("compute.instances.get",)),
        ("DELETE", r"/zones/[^/]+/instances/[^/]+$", ("compute.instances.delete",)),
        ("GET", r"/aggregated/instances$", ("compute.instances.list",)),
        ("GET", r"/zones/[^/]+/operations$", ("compute.zoneOperations.list",)),
        ("GET", r"/zones/[^/]+/operations/[^/]+$", ("compute.zoneOperations.get",)),
        ("GET", r"/aggregated/machineTypes$", ("compute.machineTypes.list",)),
        ("GET", r"/aggregated/acceleratorTypes$", ("compute.acceleratorTypes.list",)),
        ("GET", r"/global/images/family/[^/]+$", ("compute.images.getFromFamily",)),
        ("GET", r"/global/images/[^/]+$", ("compute.images.get",)),
        ("POST", r"/regions/[^/]+/advice/capacity$", ("compute.advice.capacity",)),
        (
            "POST",
            r"/regions/[^/]+/advice/capacityHistory$",
            ("compute.advice.capacityHistory",),
        ),
        ("GET", r"^/v1/services/[^/]+/skus$", ()),
        ("POST", r"^/v1/projects/[^/:]+:testIamPermissions$", ()),
    )
)


def permissions(method: str, path: str, body: Mapping[str, Any] | None = None) -> set[str]:
    """The permissions one REST call needs; KeyError for a call this table does not know."""
    for m, pattern, perms in _CALLS:
        if m == method and pattern.search(path):
            out = set(perms)
            if method == "POST" and path.endswith("/instances"):
                out |= insert_extras(body or {})
            if method == "POST" and path.endswith("/instances/bulkInsert"):
                out |= insert_extras((body or {}).get("instanceProperties") or {})
            return out
    raise KeyError(f"{method} {path} is not in providers/gcp/iam.py")


def insert_extras(body: Mapping[str, Any]) -> set[str]:
    """What an instances.insert body adds to compute.instances.create."""
    out: set[str] = set()
    if (body.get("metadata") or {}).get("items"):
        out.add("compute.instances.setMetadata")
    if body.get("labels"):
        out.add("compute.instances.setLabels")
    if body.get("serviceAccounts"):
        out |= {"compute.instances.setServiceAccount", "iam.serviceAccounts.actAs"}
    for disk in body.get("disks") or []:
        params = disk.get("initializeParams") or {}
        if params:
            out.add("compute.disks.create")
        if params.get("sourceImage"):
            out.add("compute.images.useReadOnly")
    for nic in body.get("networkInterfaces") or []:
        if nic.get("subnetwork") or nic.get("network"):
            out.add("compute.subnetworks.use")
        if nic.get("accessConfigs"):
            out.add("compute.subnetworks.useExternalIp")
    if body.get("resourcePolicies"):
        out.add("compute.resourcePolicies.use")
    return out


# What `spotwise doctor` asks projects.testIamPermissions about: every permission of the
# role, the quota-project one included.
def doctor_permissions(role: Mapping[str, Any]) -> list[str]:
    return sorted(role.get("includedPermissions") or [])
