"""VMs (and what they leave): launch, describe, terminate, list by tag, find by token; a
gang's N VMs in one proximity placement group (gangs.py).

A VM's name is derived from the attempt token, so a launch retried after a lost reply or a
restart finds the VM instead of making a second one. The VM create is a long-running
operation that launch() never waits on: it returns PENDING and describe() reads the outcome
from the VM itself (provisioningState, the instance view's error code, the power state).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from providers.azure import ttl
from providers.azure.api import Api, body, read_list, read_one
from providers.azure.errors import error_code, translate
from providers.azure.gangs import MAX_GANG, RDZV_PORT, GangLaunches, Groups, node_of_name
from providers.azure.offerings import CLOUD, split_zone
from providers.azure.parse import resource, to_instance, vanished
from providers.azure.userdata import custom_data
from providers.base import (
    TAG_NODE,
    TAG_OWNER,
    FatalError,
    Instance,
    InstanceState,
    LaunchRejected,
    LaunchRequest,
    Market,
    ProviderError,
    ResourceKind,
    ResourceRef,
    TaggedResource,
    not_found,
)

TAG_TOKEN = "spotwise-token"
TAG_VM = "spotwise-vm"  # on a NIC, disk or IP: the VM it was made for
TAG_MAX_PRICE = "spotwise-max-price"  # optional per-launch billingProfile.maxPrice
# ARM answers these while a NIC or IP is still attached to something being deleted.
_IN_USE = (
    "InUse",
    "NicReservedForAnotherVm",
    "PublicIPAddressCannotBeDeleted",
    "OperationNotAllowed",
    "AnotherOperationInProgress",
)


# describe() lists the resource group instead of one GET per VM above this many refs.
LIST_OVER = 3


def _created(create: Any, get: Any) -> dict[str, Any]:
    """Run a create poller to its end (its model is not read), then GET the resource as ARM
    sends it: the id is all a VM needs of its NIC and IP."""
    create().result()
    return read_one(get)


_TAG_NAME_FORBIDDEN = re.compile(r"[<>%&\\?/]")


def tag_key(key: str) -> str:
    """A tag name Azure accepts: at most 512 characters and none of <>%&\\?/ ("Use tags to
    organize your Azure resources", Limitations: the rule is for names; values keep them)."""
    return _TAG_NAME_FORBIDDEN.sub("_", str(key))[:512]


def vm_name(token: str) -> str:
    """A deterministic, valid VM (and Linux host) name for an attempt token."""
    return "sw-" + hashlib.sha256(token.encode()).hexdigest()[:24]


def image_reference(image: str) -> dict[str, str]:
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4:
        raise FatalError(
            f"azure: image {image!r} is neither a URN (pub:offer:sku:version) nor an id"
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


_key_lock = threading.Lock()
_throwaway_key: str | None = None


def throwaway_ssh_key() -> str:
    """An RSA public key whose private half is never kept: Azure wants a key for Linux VMs;
    nobody needs to log in to a batch box."""
    global _throwaway_key
    with _key_lock:
        if _throwaway_key is None:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric import rsa

            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _throwaway_key = (
                key.public_key()
                .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
                .decode()
                + " spotwise-throwaway"
            )
        return _throwaway_key


class Instances(GangLaunches):
    def __init__(self, api: Api, owner: str) -> None:
        self._api = api
        self._owner = owner
        self._groups = Groups(api, owner)
        self._lock = threading.Lock()
        self._deleted: dict[str, datetime] = {}  # VM names we deleted (see ttl.TOMBSTONE_KEEP)
        self._markets: dict[str, Market] = {}

    @property
    def _rg(self) -> str:
        return self._api.settings.resource_group

    def _is_ours_deleted(self, name: str, now: datetime) -> bool:
        with self._lock:
            for n, at in list(self._deleted.items()):
                if now - at > ttl.TOMBSTONE_KEEP:
                    del self._deleted[n]
            return name in self._deleted

    # ----------------------------------------------------------------- launch

    def launch(self, request: LaunchRequest) -> list[Instance]:
        s = self._api.settings
        o = request.offering
        if o.cloud != CLOUD:
            raise FatalError(f"azure launch: offering belongs to cloud {o.cloud!r}")
        if o.region not in s.locations:
            raise FatalError(f"azure launch: location {o.region} is not configured")
        if request.count > 1:
            return self._launch_gang(request)
        if request.count != 1:
            raise LaunchRejected(f"azure launch: count {request.count} is not in 1..{MAX_GANG}")
        name = vm_name(request.token)
        existing = self._get(self._rg, name)
        if existing is not None:  # a retry after a lost reply or a restart: adopt
            return [self._view(existing, ResourceRef(name, o.region, o.zone, self._rg))]
        env: dict[str, str] = {}
        if request.gang_node is not None:  # one node of a gang, replacing a lost one
            env["SPOTWISE_NODE_RANK"] = str(request.gang_node)
        group = self._group(request)
        own = request.gang_node == 0  # it hosts the rendezvous: its own address
        return [self._create_vm(request, name, request.node_of(0), env, group, own)]

    def _create_vm(
        self,
        request: LaunchRequest,
        name: str,
        node: int,
        node_env: dict[str, str],
        group: str,
        own_endpoint: bool,
    ) -> Instance:
        """One VM with its NIC (and IP): the launch of a single VM, or of one gang node."""
        s = self._api.settings
        o = request.offering
        now = self._api.now()
        env = {str(k): str(v) for k, v in request.env.items()}
        env["SPOTWISE_CLOUD"] = CLOUD
        env.update(node_env)
        if own_endpoint:  # the longest address it could be, to check the size now
            env["SPOTWISE_RDZV_ENDPOINT"] = f"255.255.255.255:{RDZV_PORT}"
        data = custom_data(request.command, env, gpus=o.gpu_count)  # LaunchRejected if bad
        subnet = s.subnet_for(o.region)
        if not subnet:
            raise FatalError(f"azure launch: no subnet_id configured for {o.region}")
        tags = {tag_key(k): str(v)[:256] for k, v in request.tags.items()}
        tags.setdefault(TAG_OWNER, self._owner)
        tags[TAG_TOKEN] = request.token[:256]
        tags[TAG_NODE] = str(node)
        zone = split_zone(o.region, o.zone)
        nic_id = self._create_network(name, o.region, zone, subnet, tags, o.pool)
        if own_endpoint:
            env["SPOTWISE_RDZV_ENDPOINT"] = f"{self._nic_ip(name)}:{RDZV_PORT}"
            data = custom_data(request.command, env, gpus=o.gpu_count)
        vm_body = self._vm_body(request, name, zone, nic_id, data, tags)
        if group:
            vm_body["properties"]["proximityPlacementGroup"] = {"id": group}
        compute = self._api.compute()
        try:
            self._api.call(
                f"create VM {name} ({o.instance_type}, {o.market.value}) in {o.zone}",
                lambda: compute.virtual_machines.begin_create_or_update(
                    self._rg, name, body(vm_body), polling=False
                ),
                pool=o.pool,
                request=True,
            )
        except ProviderError:
            self._delete_network(name)
            raise
        with self._lock:
            self._markets[name] = o.market
        return Instance(
            id=name, cloud=CLOUD, region=o.region, zone=o.zone,
            instance_type=o.instance_type, market=o.market, state=InstanceState.PENDING,
            tags=tags, launched_at=now, scope=self._rg, node=node,
        )  # fmt: skip

    def _vm_body(
        self,
        request: LaunchRequest,
        name: str,
        zone: str,
        nic_id: str,
        data: str,
        tags: dict[str, str],
    ) -> dict[str, Any]:
        s = self._api.settings
        o = request.offering
        user = s.admin_username
        props: dict[str, Any] = {
            "hardwareProfile": {"vmSize": o.instance_type},
            "storageProfile": {
                "imageReference": image_reference(s.image),
                "osDisk": {
                    "name": f"{name}-osdisk",
                    "createOption": "FromImage",
                    "diskSizeGB": s.os_disk_gb,
                    "managedDisk": {"storageAccountType": s.os_disk_type},
                    "deleteOption": "Delete",
                },
            },
            "osProfile": {
                "computerName": name,
                "adminUsername": user,
                "customData": data,
                "linuxConfiguration": {
                    "disablePasswordAuthentication": True,
                    "ssh": {
                        "publicKeys": [
                            {
                                "path": f"/home/{user}/.ssh/authorized_keys",
                                "keyData": s.ssh_public_key or throwaway_ssh_key(),
                            }
                        ]
                    },
                },
            },
            "networkProfile": {
                "networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
                ]
            },
        }
        if o.market is Market.SPOT:
            cap = request.tags.get(TAG_MAX_PRICE)
            try:
                max_price = float(cap) if cap else s.spot_max_price
            except ValueError:
                raise LaunchRejected(
                    f"azure launch: {TAG_MAX_PRICE}={cap!r} is not a number"
                ) from None
            props["priority"] = "Spot"
            props["evictionPolicy"] = "Delete"
            props["billingProfile"] = {"maxPrice": max_price}
        else:
            props["priority"] = "Regular"
        body: dict[str, Any] = {"location": o.region, "tags": tags, "properties": props}
        if zone:
            body["zones"] = [zone]
        if s.identity == "system":
            body["identity"] = {"type": "SystemAssigned"}
        elif s.identity:
            body["identity"] = {"type": "UserAssigned", "userAssignedIdentities": {s.identity: {}}}
        return body

    def _create_network(
        self, name: str, location: str, zone: str, subnet: str, tags: dict[str, str], pool: str
    ) -> str:
        """The VM's NIC (and public IP when configured), tagged like the VM. NIC creation
        takes seconds and the VM needs its id, so this one poller is waited on."""
        s = self._api.settings
        network = self._api.network()
        rtags = {**tags, TAG_VM: name}
        ipconf: dict[str, Any] = {
            "subnet": {"id": subnet},
            "privateIPAllocationMethod": "Dynamic",
        }
        if s.public_ip:
            ip_body: dict[str, Any] = {
                "location": location,
                "tags": rtags,
                "sku": {"name": "Standard"},
                "properties": {"publicIPAllocationMethod": "Static"},
            }
            if zone:
                ip_body["zones"] = [zone]
            ip = self._api.call(
                f"create public IP {name}-ip",
                lambda: _created(
                    lambda: network.public_ip_addresses.begin_create_or_update(
                        self._rg, f"{name}-ip", body(ip_body)
                    ),
                    lambda **kw: network.public_ip_addresses.get(self._rg, f"{name}-ip", **kw),
                ),
                pool=pool,
                request=True,
            )
            ipconf["publicIPAddress"] = {"id": ip.get("id")}
        nic_body = {
            "location": location,
            "tags": rtags,
            "properties": {"ipConfigurations": [{"name": "ipconfig1", "properties": ipconf}]},
        }
        nic = self._api.call(
            f"create NIC {name}-nic",
            lambda: _created(
                lambda: network.network_interfaces.begin_create_or_update(
                    self._rg, f"{name}-nic", body(nic_body)
                ),
                lambda **kw: network.network_interfaces.get(self._rg, f"{name}-nic", **kw),
            ),
            pool=pool,
            request=True,
        )
        return str(nic.get("id"))

    def _delete_network(self, name: str) -> None:
        """Best effort, after a create that failed: what is left is found by list_tagged."""
        for kind, rname in (
            (ResourceKind.NIC, f"{name}-nic"),
            (ResourceKind.ADDRESS, f"{name}-ip"),
        ):
            try:
                self._delete(ResourceRef(rname, scope=self._rg, kind=kind))
            except ProviderError as exc:
                self._api.emit(f"azure: could not delete {rname} after a failed launch: {exc}")

    # ----------------------------------------------------------------- observe

    def _get(self, rg: str, name: str) -> dict[str, Any] | None:
        compute = self._api.compute()
        try:
            return read_one(
                lambda **kw: compute.virtual_machines.get(rg, name, expand="instanceView", **kw)
            )
        except ResourceNotFoundError:
            return None
        except Exception as exc:
            raise translate(exc, what=f"get VM {name}", secrets=self._api.secrets()) from None

    def _list_vms(self, rg: str) -> list[dict[str, Any]]:
        """Every VM of the group, each with its instance view. `$expand=instanceView` on a
        list is documented only with a `$filter` (Virtual Machines - List, REST reference),
        and list rows may come without it (as VirtualMachines_ListByLocation's example
        does): such a VM's instance view is read on its own rather than taken as pending."""
        compute = self._api.compute()
        vms = self._api.call(
            f"list VMs in {rg}",
            lambda: read_list(
                lambda **kw: compute.virtual_machines.list(rg, expand="instanceView", **kw)
            ),
        )
        for vm in vms:
            props = vm.setdefault("properties", {})
            if props.get("instanceView") is None and vm.get("name"):
                name = str(vm["name"])
                try:
                    props["instanceView"] = read_one(
                        lambda name=name, **kw: compute.virtual_machines.instance_view(
                            rg, name, **kw
                        )
                    )
                except ResourceNotFoundError:
                    props["instanceView"] = {}  # gone between the list and now
                except Exception as exc:
                    raise translate(
                        exc, what=f"instance view of VM {name}", secrets=self._api.secrets()
                    ) from None
        return vms

    def _view(self, raw: dict[str, Any], ref: ResourceRef) -> Instance:
        now = self._api.now()
        name = str(raw.get("name", ref.id))
        inst = to_instance(
            raw, now, scope=ref.scope or self._rg,
            deleted_by_us=self._is_ours_deleted(name, now), launched_at=ref.launched_at,
        )  # fmt: skip
        with self._lock:
            self._markets[name] = inst.market
        return inst

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        """One GET per VM, or one list of the resource group when several are asked for
        (ARM's read budget is per subscription and hour)."""
        listed: dict[str, dict[str, dict[str, Any]]] = {}
        groups: dict[str, int] = {}
        for ref in refs:
            groups[ref.scope or self._rg] = groups.get(ref.scope or self._rg, 0) + 1
        for rg, n in groups.items():
            if n > LIST_OVER:
                vms = self._list_vms(rg)
                listed[rg] = {str(v.get("name", "")).lower(): v for v in vms}
        out = []
        for ref in refs:
            rg = ref.scope or self._rg
            raw = listed[rg].get(ref.id.lower()) if rg in listed else self._get(rg, ref.id)
            if raw is not None:
                out.append(self._view(raw, ref))
                continue
            now = self._api.now()
            ours = self._is_ours_deleted(ref.id, now)
            with self._lock:
                market = self._markets.get(ref.id)
            if ours or market is not None or ref.launched_at is not None:
                # ARM shows an accepted PUT at once, so a VM we launched that is gone was
                # deleted: by us, or by Azure (Spot eviction under the Delete policy).
                out.append(vanished(ref, now, deleted_by_us=ours, market=market))
            else:
                out.append(not_found(ref, CLOUD))
        return out

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        """The VM of this token, or its gang's nodes (`<name>-n<i>`, one list of the
        group: a gang launch that died half-way is found whole)."""
        name = vm_name(token)
        raw = self._get(self._rg, name)
        raws = [raw] if raw is not None else [
            v for v in self._list_vms(self._rg)
            if str(v.get("name", "")).startswith(f"{name}-n")
            and node_of_name(str(v.get("name", ""))) is not None
        ]  # fmt: skip
        if region:
            raws = [r for r in raws if str(r.get("location", "")) == region]
        found = [self._view(r, ResourceRef(str(r.get("name")), scope=self._rg)) for r in raws]
        return sorted(found, key=lambda i: i.node)

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        """Our VMs (any state: a stopped or failed VM still holds a disk and a NIC, and a
        stopped one is still billed) and the NICs, disks and IPs no VM holds any more."""
        compute, network = self._api.compute(), self._api.network()
        rg = self._rg
        now = self._api.now()
        out: list[TaggedResource] = []
        vms = self._list_vms(rg)
        ours: dict[str, dict[str, str]] = {}
        for raw in vms:
            if (raw.get("tags") or {}).get(TAG_OWNER) != owner:
                continue
            inst = self._view(raw, ResourceRef(str(raw.get("name")), scope=rg))
            ours[inst.id.lower()] = inst.tags
            gone = (
                inst.state is InstanceState.ENDED
                and str((raw.get("properties") or {}).get("provisioningState", "")).lower()
                == "deleting"
            )
            out.append(TaggedResource(inst.ref, dict(inst.tags), not gone, inst.launched_at))
        nics = self._api.call(
            f"list NICs in {rg}",
            lambda: read_list(lambda **kw: network.network_interfaces.list(rg, **kw)),
        )
        for raw in nics:
            props = raw.get("properties") or {}
            if (raw.get("tags") or {}).get(TAG_OWNER) == owner and not props.get("virtualMachine"):
                out.append(resource(raw, ResourceKind.NIC, rg))
        ips = self._api.call(
            f"list public IPs in {rg}",
            lambda: read_list(lambda **kw: network.public_ip_addresses.list(rg, **kw)),
        )
        for raw in ips:
            props = raw.get("properties") or {}
            if (raw.get("tags") or {}).get(TAG_OWNER) == owner and not props.get("ipConfiguration"):
                out.append(resource(raw, ResourceKind.ADDRESS, rg))
        disks = self._api.call(
            f"list disks in {rg}",
            lambda: read_list(lambda **kw: compute.disks.list_by_resource_group(rg, **kw)),
        )
        for raw in disks:
            out.extend(self._disk(raw, owner, ours, now))
        return out + self._groups.list_tagged(owner)

    def _disk(
        self, raw: dict[str, Any], owner: str, ours: dict[str, dict[str, str]], now: datetime
    ) -> list[TaggedResource]:
        """An unattached disk with our tag is left over. Azure does not copy a VM's tags to
        the OS disk it creates, so a disk held by one of our VMs gets them here (best
        effort), and outlives the VM tagged."""
        tags = raw.get("tags") or {}
        props = raw.get("properties") or {}
        holder = str(raw.get("managedBy") or props.get("managedBy") or "").rsplit("/", 1)[-1]
        if holder and holder.lower() in ours:
            if tags.get(TAG_OWNER) != owner:
                name = str(raw.get("name"))
                vm_tags = {**ours[holder.lower()], TAG_VM: holder}
                compute = self._api.compute()
                try:
                    compute.disks.begin_update(
                        self._rg, name, body({"tags": {**tags, **vm_tags}}), polling=False
                    )
                except Exception as exc:
                    self._api.emit(f"azure: could not tag disk {name}: {error_code(exc)}")
            return []
        if tags.get(TAG_OWNER) == owner and str(props.get("diskState", "Unattached")) in (
            "Unattached",
            "Reserved",
        ):
            return [resource(raw, ResourceKind.DISK, self._rg)]
        return []

    # ----------------------------------------------------------------- terminate

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        """Delete VMs (their NIC and OS disk go with them: deleteOption Delete) and left-over
        NICs, disks and IPs; gone ones are not an error. Never waits for a delete."""
        now = self._api.now()
        for ref in refs:
            if ref.kind is ResourceKind.INSTANCE:
                with self._lock:
                    self._deleted[ref.id] = now
                self._delete(ref)
                # ARM answers 204 for a VM that is already gone, so always try what it may
                # have left: still attached (in use) is no error, the next pass gets it.
                self._delete_network(ref.id)
            elif ref.kind is ResourceKind.PLACEMENT_GROUP:
                self._groups.delete(ref)
            else:
                self._delete(ref)

    def _delete(self, ref: ResourceRef) -> bool:
        """Start deleting one resource; False when it does not exist."""
        rg = ref.scope or self._rg
        if ref.kind is ResourceKind.INSTANCE:
            ops, what = self._api.compute().virtual_machines, "VM"
        elif ref.kind is ResourceKind.DISK:
            ops, what = self._api.compute().disks, "disk"
        elif ref.kind is ResourceKind.NIC:
            ops, what = self._api.network().network_interfaces, "NIC"
        elif ref.kind is ResourceKind.ADDRESS:
            ops, what = self._api.network().public_ip_addresses, "public IP"
        else:
            return False
        try:
            ops.begin_delete(rg, ref.id, polling=False)
        except ResourceNotFoundError:
            return False
        except Exception as exc:
            code = error_code(exc)
            if any(x in code for x in _IN_USE):
                return True  # still attached to something being deleted: the next pass
            raise translate(
                exc, what=f"delete {what} {ref.id}", secrets=self._api.secrets()
            ) from None
        return True
