"""Gangs on Azure: N VMs in one proximity placement group, all or nothing.

Why N VMs and not a flexible scale set: each node is the single VM the adapter already
launches (its NIC, its own custom data carrying its rank and node 0's address, a
deterministic name a retry finds), so a node lost to eviction is replaced alone by one more
VM put into the same group, and deleted alone; a scale set would give every instance the
same custom data, name them itself, and add a second resource lifecycle to collect, with no
stronger all-or-nothing (Azure allocates a scale set's instances one by one as well).

- the group: `Microsoft.Compute/proximityPlacementGroups`, one per attempt, in the gang's
  zone, with the VM size as its intent, tagged like the VMs (leak collection deletes it
  once the attempt is over; ARM refuses while a VM is still in it: the next sweep tries);
- node 0's NIC first: its private address is every node's rendezvous endpoint;
- all or nothing: a node refused while the gang is launched (capacity, quota, a bad
  request) deletes the nodes already created before the error is raised, and says how many
  fitted; an allocation that fails after launch returned is the scheduler's to act on
  (it terminates what came up, as for any gang not whole).

The request and response shapes are the Azure REST API specs' examples
(ProximityPlacementGroup_CreateOrUpdate, _Get, _ListByResourceGroup; a VM's
`properties.proximityPlacementGroup.id`; a NIC's `ipConfigurations[].properties.
privateIPAddress`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from providers.azure.api import Api, body, read_list, read_one
from providers.azure.errors import error_code, translate
from providers.azure.offerings import split_zone
from providers.azure.parse import resource
from providers.base import (
    TAG_NODE,
    TAG_OWNER,
    CapacityUnavailable,
    Instance,
    LaunchRejected,
    LaunchRequest,
    ProviderError,
    ResourceKind,
    ResourceRef,
    TaggedResource,
    TransientError,
)

# A gang's nodes are one VM PUT each: this bounds the requests one launch makes.
MAX_GANG = 32
RDZV_PORT = 29400  # torchrun's default static rendezvous port, on node 0
GROUP_PREFIX = "sw-ppg-"
_NODE = re.compile(r"-n(\d+)$")
# ARM's answer to deleting a group that still holds a VM is not in the recorded examples;
# codes naming a resource in use (or a conflicting operation) are taken as "not yet".
_IN_USE = ("InUse", "OperationNotAllowed", "Conflict", "AnotherOperationInProgress")


def node_name(base: str, node: int) -> str:
    return f"{base}-n{node}"


def node_of_name(name: str) -> int | None:
    m = _NODE.search(name)
    return int(m.group(1)) if m else None


def group_name(group: str) -> str:
    """A proximity placement group name for a placement group (the attempt's)."""
    return GROUP_PREFIX + hashlib.sha256(group.encode()).hexdigest()[:24]


def private_ip(nic: dict[str, Any]) -> str:
    """The primary private address of a NIC document, "" when it has none yet."""
    for conf in (nic.get("properties") or {}).get("ipConfigurations") or []:
        ip = (conf.get("properties") or {}).get("privateIPAddress")
        if ip:
            return str(ip)
    return ""


class Groups:
    """The proximity placement groups of our gangs: create, list, delete."""

    def __init__(self, api: Api, owner: str) -> None:
        self._api = api
        self._owner = owner

    @property
    def _rg(self) -> str:
        return self._api.settings.resource_group

    def ensure(self, request: LaunchRequest, tags: dict[str, str]) -> str:
        """The attempt's group (created or updated: the same body each time): its id."""
        o = request.offering
        assert request.placement_group is not None
        name = group_name(request.placement_group)
        doc: dict[str, Any] = {
            "location": o.region,
            "tags": {**tags, TAG_OWNER: tags.get(TAG_OWNER, self._owner)},
            "properties": {
                "proximityPlacementGroupType": "Standard",
                "intent": {"vmSizes": [o.instance_type]},
            },
        }
        zone = split_zone(o.region, o.zone)
        if zone:
            doc["zones"] = [zone]
        ops = self._api.compute().proximity_placement_groups
        got = self._api.call(
            f"create proximity placement group {name} in {o.zone}",
            lambda: read_one(lambda **kw: ops.create_or_update(self._rg, name, body(doc), **kw)),
            pool=o.pool,
            request=True,
        )
        return str(got.get("id") or _group_id(self._api, self._rg, name))

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        ops = self._api.compute().proximity_placement_groups
        raws = self._api.call(
            f"list proximity placement groups in {self._rg}",
            lambda: read_list(lambda **kw: ops.list_by_resource_group(self._rg, **kw)),
        )
        return [
            resource(raw, ResourceKind.PLACEMENT_GROUP, self._rg)
            for raw in raws
            if (raw.get("tags") or {}).get(TAG_OWNER) == owner
        ]

    def delete(self, ref: ResourceRef) -> None:
        """Delete a group; gone is not an error, nor still holding a VM being deleted."""
        ops = self._api.compute().proximity_placement_groups
        try:
            ops.delete(ref.scope or self._rg, ref.id)
        except ResourceNotFoundError:
            return
        except Exception as exc:
            # ARM answers a DELETE of a resource that is not there with 204, which the
            # operation's spec (200 only) makes the SDK raise.
            if getattr(exc, "status_code", None) == 204:
                return
            if any(x in error_code(exc) for x in _IN_USE):
                return
            raise translate(
                exc, what=f"delete proximity placement group {ref.id}", secrets=self._api.secrets()
            ) from None


class GangLaunches:
    """A gang's launch, as the Instances class that mixes it in runs it: N VMs (its
    `_create_vm`), node 0's address for all, undone on a refusal (its `terminate`)."""

    _api: Api
    _owner: str
    _groups: Groups

    @property
    def _rg(self) -> str:
        return self._api.settings.resource_group

    def _get(self, rg: str, name: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _view(self, raw: dict[str, Any], ref: ResourceRef) -> Instance:
        raise NotImplementedError

    def _create_vm(
        self,
        request: LaunchRequest,
        name: str,
        node: int,
        node_env: dict[str, str],
        group: str,
        own_endpoint: bool,
    ) -> Instance:
        raise NotImplementedError

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        raise NotImplementedError

    def _launch_gang(self, request: LaunchRequest) -> list[Instance]:
        """N VMs in one proximity placement group (gangs.py): node 0 first, whose private
        address every node rendezvouses at. A node refused on the way deletes the ones made
        before it (all or nothing) and the error says how many fitted; a retry with the
        same token finds the nodes made and completes the rest."""
        o = request.offering
        n = request.count
        if n > MAX_GANG:
            raise LaunchRejected(f"azure launch: count {n} is not in 1..{MAX_GANG}")
        from providers.azure.instances import vm_name

        base = vm_name(request.token)
        group = self._group(request)
        out: list[Instance] = []
        endpoint = ""
        for node in range(n):
            name = node_name(base, node)
            existing = self._get(self._rg, name)
            try:
                if existing is not None:
                    out.append(self._view(existing, ResourceRef(name, o.region, o.zone, self._rg)))
                else:
                    env = {"SPOTWISE_NODE_RANK": str(node), "SPOTWISE_NNODES": str(n)}
                    if endpoint:
                        env["SPOTWISE_RDZV_ENDPOINT"] = endpoint
                    out.append(self._create_vm(request, name, node, env, group, node == 0))
                if node == 0:
                    endpoint = f"{self._nic_ip(name)}:{RDZV_PORT}"
            except ProviderError as exc:
                self._unwind(out)
                if isinstance(exc, CapacityUnavailable):
                    what = f"only {node} of {n} {o.instance_type} in {o.zone}"
                    raise type(exc)(
                        f"{what} before the capacity error: {exc}", pool=exc.pool or o.pool
                    ) from None
                raise
        return out

    def _unwind(self, made: list[Instance]) -> None:
        """All or nothing: delete the nodes a gang launch made before it failed."""
        try:
            self.terminate([i.ref for i in made])
        except ProviderError as exc:
            self._api.emit(f"azure: could not delete a gang's first nodes: {exc}")

    def _group(self, request: LaunchRequest) -> str:
        """The gang's proximity placement group id ("" for a VM of no gang)."""
        if not request.placement_group:
            return ""
        from providers.azure.instances import tag_key

        tags = {tag_key(k): str(v)[:256] for k, v in request.tags.items()}
        tags.setdefault(TAG_OWNER, self._owner)
        tags.pop(TAG_NODE, None)
        return self._groups.ensure(request, tags)

    def _nic_ip(self, vm: str) -> str:
        network = self._api.network()
        nic = self._api.call(
            f"get NIC {vm}-nic",
            lambda: read_one(
                lambda **kw: network.network_interfaces.get(self._rg, f"{vm}-nic", **kw)
            ),
        )
        ip = private_ip(nic)
        if not ip:
            raise TransientError(f"azure: NIC {vm}-nic has no private address yet")
        return ip


def _group_id(api: Api, rg: str, name: str) -> str:
    sub = api.settings.subscription_id
    return (
        f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/"
        f"proximityPlacementGroups/{name}"
    )


__all__ = [
    "MAX_GANG",
    "RDZV_PORT",
    "GangLaunches",
    "Groups",
    "group_name",
    "node_name",
    "node_of_name",
    "private_ip",
]
