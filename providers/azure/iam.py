"""What Azure RBAC must allow for each ARM call the adapter makes, so the role definition
the README ships (role-definition.json) can be checked against the calls the code really
makes, and `spotwise doctor` can compare it with the caller's permissions on the resource
group. Action names are Azure's "Azure resource provider operations" (Microsoft.Compute,
Microsoft.Network, Microsoft.ManagedIdentity, Microsoft.ResourceGraph); what a PUT body adds
(joining a NIC, a subnet or a public IP, creating the managed OS disk, assigning a
user-assigned identity, putting a gang's VM into its proximity placement group) follows the
built-in Virtual Machine Contributor and Network Contributor definitions and "Create a
virtual machine" permissions in the Azure docs. Pure data and functions.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any

_TYPES = {
    "virtualmachines": "Microsoft.Compute/virtualMachines",
    "disks": "Microsoft.Compute/disks",
    "networkinterfaces": "Microsoft.Network/networkInterfaces",
    "publicipaddresses": "Microsoft.Network/publicIPAddresses",
    "proximityplacementgroups": "Microsoft.Compute/proximityPlacementGroups",
}
_VERB = {"GET": "read", "PUT": "write", "PATCH": "write", "DELETE": "delete"}
_RES = re.compile(
    r"/providers/Microsoft\.(?:Compute|Network)/(?P<type>virtualMachines|disks|"
    r"networkInterfaces|publicIPAddresses|proximityPlacementGroups)(?:/[^/]+)?"
    r"(?P<view>/instanceView)?$",
    re.IGNORECASE,
)


def actions(method: str, path: str, body: Mapping[str, Any] | None = None) -> set[str]:
    """The actions one ARM call needs; KeyError for a call this table does not know."""
    body = body or {}
    if re.search(r"/providers/Microsoft\.Authorization/permissions$", path, re.I):
        return set()  # the caller's own permissions: no action needed
    if re.search(r"/providers/Microsoft\.Compute/skus$", path, re.I):
        return {"Microsoft.Compute/skus/read"}
    if re.search(r"/placementScores/spot/generate$", path, re.I):
        return {"Microsoft.Compute/locations/placementScores/generate/action"}
    if re.search(r"^/providers/Microsoft\.ResourceGraph/resources$", path, re.I):
        # "Submits a query on resources within specified subscriptions, management groups or
        # tenant scope" (Microsoft.ResourceGraph operations); the Reader role holds it.
        return {"Microsoft.ResourceGraph/resources/read"}
    if re.search(r"/artifacttypes/vmimage/offers/[^/]+/skus/[^/]+/versions$", path, re.I):
        return {"Microsoft.Compute/locations/publishers/artifacttypes/offers/skus/versions/read"}
    if re.search(r"/providers/(Fake|Microsoft\.Network/locations/[^/]+)/operations/", path, re.I):
        # Polling a network create (the fake's operation URL stands in for ARM's).
        return {"Microsoft.Network/locations/operations/read"}
    m = _RES.search(path)
    if not m or method not in _VERB:
        raise KeyError(f"{method} {path} is not in providers/azure/iam.py")
    kind = _TYPES[m.group("type").lower()]
    if m.group("view"):
        return {f"{kind}/instanceView/read"}
    out = {f"{kind}/{_VERB[method]}"}
    if method == "PUT":
        out |= _joins(kind, body)
    return out


def _joins(kind: str, body: Mapping[str, Any]) -> set[str]:
    props = body.get("properties") or {}
    out: set[str] = set()
    if kind.endswith("virtualMachines"):
        if (props.get("networkProfile") or {}).get("networkInterfaces"):
            out.add("Microsoft.Network/networkInterfaces/join/action")
        if (props.get("storageProfile") or {}).get("osDisk", {}).get("managedDisk"):
            out.add("Microsoft.Compute/disks/write")
        if (body.get("identity") or {}).get("userAssignedIdentities"):
            out.add("Microsoft.ManagedIdentity/userAssignedIdentities/assign/action")
        if props.get("proximityPlacementGroup"):  # a gang's node joins its group
            out.add("Microsoft.Compute/proximityPlacementGroups/read")
    if kind.endswith("networkInterfaces"):
        for conf in props.get("ipConfigurations") or []:
            cp = conf.get("properties") or {}
            if cp.get("subnet"):
                out.add("Microsoft.Network/virtualNetworks/subnets/join/action")
            if cp.get("publicIPAddress"):
                out.add("Microsoft.Network/publicIPAddresses/join/action")
    return out


def allows(grants: Iterable[Mapping[str, Any]], action: str) -> bool:
    """Whether a permissions list ([{"actions", "notActions"}]) allows `action`: an entry
    allows it when one of its actions matches (wildcards, case-insensitive) and none of its
    notActions does."""

    def hit(patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in patterns)

    return any(hit(g.get("actions") or []) and not hit(g.get("notActions") or []) for g in grants)
