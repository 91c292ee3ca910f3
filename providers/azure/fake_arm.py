"""A loopback ARM fake: VMs, NICs, public IPs, disks, resource SKUs and long-running
operations (Azure-AsyncOperation), for the real azure-mgmt-compute/-network clients.

Stdlib only (ThreadingHTTPServer on 127.0.0.1:0). State changes that Azure makes on its own
(allocation, a delete finishing) are applied as pending operations at the next request, so
tests need no sleeps. Injections: `fail_create` (synchronous error on the next VM PUT),
`fail_later` (the next VM create's operation fails with that code), `evict()`,
`power_off()` (the job's own shutdown), `leak()` (a tagged orphan NIC/disk/IP). Spot
placement scores (`spot_scores`, `fail_scores`) and Resource Graph's Spot eviction-rate
bands (`graph`, fake_graph.py) answer the risk readers.

Gangs: proximity placement groups (PUT, GET, list, DELETE; the body and answers of the REST
specs' ProximityPlacementGroup_* examples; a group that still holds a VM refuses to be
deleted with OperationNotAllowed: the exact code is not in the recorded examples), a VM put
into one (`properties.proximityPlacementGroup.id`, listed in the group's
`virtualMachines`), NICs with a private address (the first four of a subnet are Azure's),
`capacity` (VM size -> how many more it allocates: past it a create's operation fails with
AllocationFailed, OverconstrainedAllocationRequest in a group) and `refuse_after` (the VM
PUT after that many more is refused at once).

Pointing the real SDK at it: `arm = FakeArm(fake_catalog.skus(), subscription)` listens at
once on `arm.url`; configure `[providers.azure]` with the same `subscription_id`,
`base_url = arm.url` and `credentials = "anonymous"` (azure-core then sends no token, which it
would refuse to send over http), and `prices_url` from a FakePrices (fake_prices.py).
AzureProvider's ComputeManagementClient and NetworkManagementClient then talk only to the
fake; tests/support/azure_harness.py `settings_for()` is the whole recipe. `arm.close()` stops it.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from providers.azure.fake_graph import ResourceGraph

_RES = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/"
    r"(?P<ns>Microsoft\.Compute|Microsoft\.Network)/"
    r"(?P<type>virtualMachines|disks|networkInterfaces|publicIPAddresses|proximityPlacementGroups)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<extra>instanceView))?$",
    re.IGNORECASE,
)
# Spot Placement Scores - Post (Azure Compute REST reference): the answer echoes the request
# and adds placementScores rows of sku, region, availabilityZone, score, isQuotaAvailable.
_SPOT_SCORES = re.compile(
    r"^/subscriptions/[^/]+/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/"
    r"placementScores/spot/generate$",
    re.IGNORECASE,
)
_GRAPH = re.compile(r"^/providers/Microsoft\.ResourceGraph/resources$", re.IGNORECASE)
_SKUS = re.compile(r"^/subscriptions/[^/]+/providers/Microsoft\.Compute/skus$", re.IGNORECASE)
_OPS = re.compile(r"^/subscriptions/[^/]+/providers/Fake/operations/(?P<id>\w+)$")
_PERMISSIONS = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Authorization/permissions$",
    re.IGNORECASE,
)
_IMAGE_VERSIONS = re.compile(
    r"^/subscriptions/[^/]+/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/publishers/"
    r"(?P<pub>[^/]+)/artifacttypes/vmimage/offers/(?P<offer>[^/]+)/skus/(?P<sku>[^/]+)/versions$",
    re.IGNORECASE,
)
_TYPES = {
    "virtualmachines": ("Microsoft.Compute", "virtualMachines"),
    "disks": ("Microsoft.Compute", "disks"),
    "networkinterfaces": ("Microsoft.Network", "networkInterfaces"),
    "publicipaddresses": ("Microsoft.Network", "publicIPAddresses"),
    "proximityplacementgroups": ("Microsoft.Compute", "proximityPlacementGroups"),
}
# Azure's messages for a VM size out of capacity: AllocationFailed, and
# OverconstrainedAllocationRequest when a proximity placement group narrows where it may go
# (fixtures/proximity_placement_groups.json, each with its source).
ALLOCATION_ERRORS: dict[str, str] = {
    e["code"]: e["message"]
    for e in json.loads(
        (Path(__file__).with_name("fixtures") / "proximity_placement_groups.json").read_text()
    )["errors"]
}


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str = "injected") -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeArm:
    def __init__(self, skus: list[dict[str, Any]], subscription: str) -> None:
        self.skus = skus
        self.sub = subscription
        self.lock = threading.RLock()
        self.res: dict[str, dict[tuple[str, str], dict[str, Any]]] = {t: {} for t in _TYPES}
        self.ops: dict[str, dict[str, Any]] = {}
        self.pending: list[Callable[[], None]] = []  # applied at the next request
        self.requests: list[tuple[str, str, Any]] = []
        # (location, size, zone) -> "High" | "Medium" | "Low" | "DataNotFoundOrStale"
        self.spot_scores: dict[tuple[str, str, str], str] = {}
        self.score_calls: list[Any] = []
        self.fail_scores = False
        self.graph = ResourceGraph()  # Spot eviction-rate bands (fake_graph.py)
        self.fail_create: ArmError | None = None
        self.fail_later: tuple[str, str] | None = None  # (code, message) for the next create
        self.capacity: dict[str, int] = {}  # VM size -> allocations left (absent: no limit)
        self.refuse_after: tuple[int, ArmError] | None = None  # (PUTs to let through, error)
        self._ips = itertools.count(4)
        self.echo_auth = False
        # Permissions - List For Resource Group: the caller's actions (Authorization REST
        # reference, api-version 2022-04-01: {"value": [{"actions", "notActions", ...}]}).
        self.actions: list[str] = ["*"]
        self.not_actions: list[str] = []
        # Marketplace images (publisher, offer, sku) with a version in every location.
        self.images: set[tuple[str, str, str]] = {("microsoft-dsvm", "ubuntu-hpc", "2204")}
        # Virtual Machines - List with $expand=instanceView is documented only with a
        # $filter; rows without the view are what the adapter must cope with (the list
        # examples of the REST specs, e.g. VirtualMachines_ListByLocation, carry none).
        self.list_without_instance_view = False
        self._ids = itertools.count(1)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- helpers for tests -----------------------------------------------------------------
    def reset_answers(self) -> None:
        """Every injection and answer back to its default (the fake is shared per process)."""
        with self.lock:
            self.fail_create = self.fail_later = None
            self.capacity.clear()
            self.refuse_after = None
            self.echo_auth = False
            self.actions, self.not_actions = ["*"], []
            self.images = {("microsoft-dsvm", "ubuntu-hpc", "2204")}
            self.list_without_instance_view = False
            self.graph.reset()

    def rid(self, rg: str, type_: str, name: str) -> str:
        ns, t = _TYPES[type_.lower()]
        return f"/subscriptions/{self.sub}/resourceGroups/{rg}/providers/{ns}/{t}/{name}"

    def vm(self, rg: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            self._tick()
            return self.res["virtualmachines"].get((rg.lower(), name.lower()))

    def names(self, type_: str) -> list[str]:
        with self.lock:
            self._tick()
            return sorted(d["name"] for d in self.res[type_.lower()].values())

    def vm_puts(self) -> list[dict[str, Any]]:
        return [b for m, p, b in self.requests if m == "PUT" and "/virtualMachines/" in p]

    def evict(self, rg: str, name: str, *, stage: str = "gone") -> None:
        """Spot eviction under the Delete policy: "deleting" (mid-way) or "gone"."""
        with self.lock:
            vm = self.res["virtualmachines"][(rg.lower(), name.lower())]
            if stage == "deleting":
                vm["properties"]["provisioningState"] = "Deleting"
                vm["_power"] = "PowerState/deallocating"
            else:
                self._remove_vm(rg, name)

    def power_off(self, rg: str, name: str) -> None:
        with self.lock:
            self.res["virtualmachines"][(rg.lower(), name.lower())]["_power"] = "PowerState/stopped"

    def leak(self, rg: str, type_: str, name: str, tags: dict[str, str], location: str) -> None:
        doc: dict[str, Any] = {
            "id": self.rid(rg, type_, name),
            "name": name,
            "location": location,
            "type": "/".join(_TYPES[type_.lower()]),
            "tags": dict(tags),
            "properties": {"provisioningState": "Succeeded"},
        }
        if type_.lower() == "disks":
            doc["properties"]["diskState"] = "Unattached"
        with self.lock:
            self.res[type_.lower()][(rg.lower(), name.lower())] = doc

    # -- state machine ---------------------------------------------------------------------
    def _tick(self) -> None:
        todo, self.pending = self.pending, []
        for fn in todo:
            fn()

    def _op(
        self, status: str = "Succeeded", error: dict[str, Any] | None = None, in_progress: int = 0
    ) -> str:
        oid = f"op{next(self._ids)}"
        self.ops[oid] = {"status": status, "error": error, "in_progress": in_progress}
        return f"{self.url}/subscriptions/{self.sub}/providers/Fake/operations/{oid}"

    def _remove_vm(self, rg: str, name: str) -> None:
        vm = self.res["virtualmachines"].pop((rg.lower(), name.lower()), None)
        if vm is None:
            return
        p = vm["properties"]
        group = (p.get("proximityPlacementGroup") or {}).get("id", "")
        ppg = self.res["proximityplacementgroups"].get(
            (rg.lower(), group.rsplit("/", 1)[-1].lower())
        )
        if ppg is not None:
            held = ppg["properties"].setdefault("virtualMachines", [])
            ppg["properties"]["virtualMachines"] = [v for v in held if v.get("id") != vm["id"]]
        osd = p.get("storageProfile", {}).get("osDisk", {})
        disk = self.res["disks"].get((rg.lower(), str(osd.get("name", "")).lower()))
        if disk is not None:
            if osd.get("deleteOption") == "Delete":
                self.res["disks"].pop((rg.lower(), disk["name"].lower()))
            else:
                disk.pop("managedBy", None)
                disk["properties"]["diskState"] = "Unattached"
        for ref in p.get("networkProfile", {}).get("networkInterfaces", []):
            nic_name = ref["id"].rsplit("/", 1)[-1]
            nic = self.res["networkinterfaces"].get((rg.lower(), nic_name.lower()))
            if nic is None:
                continue
            nic["properties"].pop("virtualMachine", None)
            if (ref.get("properties") or {}).get("deleteOption") == "Delete":
                self._remove_nic(rg, nic_name)

    def _remove_nic(self, rg: str, name: str) -> None:
        nic = self.res["networkinterfaces"].pop((rg.lower(), name.lower()), None)
        for conf in (nic or {}).get("properties", {}).get("ipConfigurations", []):
            pip = (conf.get("properties") or {}).get("publicIPAddress")
            if pip:
                ip = self.res["publicipaddresses"].get(
                    (rg.lower(), pip["id"].rsplit("/", 1)[-1].lower())
                )
                if ip is not None:
                    ip["properties"].pop("ipConfiguration", None)

    def _view(self, doc: dict[str, Any], expand: bool) -> dict[str, Any]:
        out = {k: v for k, v in doc.items() if not k.startswith("_")}
        out["properties"] = dict(doc["properties"])
        if expand and "_statuses" in doc:
            statuses = list(doc["_statuses"])
            if doc.get("_power"):
                statuses.append({"code": doc["_power"], "level": "Info"})
            out["properties"]["instanceView"] = {"statuses": statuses}
        return out

    # -- request handling ------------------------------------------------------------------
    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, headers: Any
    ) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self.requests.append((method, path, body))
            self._tick()
            if self.echo_auth:
                raise ArmError(
                    403,
                    "AuthorizationFailed",
                    f"denied for Authorization: {headers.get('Authorization')}",
                )
            m = _OPS.match(path)
            if m:
                op = self.ops[m.group("id")]
                if op["in_progress"] > 0:
                    op["in_progress"] -= 1
                    return 200, {"status": "InProgress"}, {}
                status: dict[str, Any] = {"status": op["status"]}
                if op["error"]:
                    status["error"] = op["error"]
                return 200, status, {}
            m = _SPOT_SCORES.match(path)
            if m and method == "POST":
                self.score_calls.append(body)
                if self.fail_scores:
                    raise ArmError(429, "TooManyRequests", "Spot placement score: throttled")
                sizes = [d.get("sku", "") for d in (body or {}).get("desiredSizes", [])]
                rows = [
                    {"sku": sku, "region": loc, "availabilityZone": zone, "score": score,
                     "isQuotaAvailable": True}
                    for (loc, sku, zone), score in sorted(self.spot_scores.items())
                    if sku in sizes and loc in (body or {}).get("desiredLocations", [])
                ]  # fmt: skip
                return 200, {**(body or {}), "placementScores": rows}, {}
            if _GRAPH.match(path) and method == "POST":
                return self.graph.answer(body)
            if _PERMISSIONS.match(path):
                return 200, {"value": [{"actions": list(self.actions),
                                        "notActions": list(self.not_actions),
                                        "dataActions": [], "notDataActions": []}]}, {}  # fmt: skip
            m = _IMAGE_VERSIONS.match(path)
            if m:
                image = (m.group("pub").lower(), m.group("offer").lower(), m.group("sku").lower())
                if image not in self.images:
                    raise ArmError(404, "NotFound", f"Artifact: VMImage was not found: {path}")
                return 200, [{"name": "22.04.2026051201", "location": m.group("loc"),
                              "id": f"{path}/22.04.2026051201"}], {}  # fmt: skip
            if _SKUS.match(path):
                flt = (query.get("$filter") or [""])[0]
                loc = re.search(r"location eq '([^']+)'", flt)
                rows = [
                    s
                    for s in self.skus
                    if not loc or loc.group(1).lower() in [x.lower() for x in s["locations"]]
                ]
                return 200, {"value": rows}, {}
            m = _RES.match(path)
            if not m:
                raise ArmError(404, "InvalidResourceType", f"no route {path}")
            rg, type_, name = m.group("rg"), m.group("type").lower(), m.group("name")
            store = self.res[type_]
            expand = "instanceview" in (query.get("$expand") or [""])[0].lower()
            if name is None:
                if method != "GET":
                    raise ArmError(405, "MethodNotAllowed")
                view = expand and not (
                    type_ == "virtualmachines" and self.list_without_instance_view
                )
                rows = [self._view(d, view) for (g, _), d in store.items() if g == rg.lower()]
                return 200, {"value": rows}, {}
            key = (rg.lower(), name.lower())
            doc = store.get(key)
            if method == "GET":
                if doc is None:
                    raise ArmError(404, "ResourceNotFound", f"{name} not found")
                if m.group("extra"):
                    return 200, self._view(doc, True)["properties"]["instanceView"], {}
                return 200, self._view(doc, expand), {}
            if method == "DELETE":
                if doc is None:
                    return 204, None, {}
                return self._delete(type_, rg, name, doc)
            if method == "PATCH":
                if doc is None:
                    raise ArmError(404, "ResourceNotFound", f"{name} not found")
                doc["tags"] = dict((body or {}).get("tags") or doc.get("tags") or {})
                return 200, self._view(doc, False), {}
            if method == "PUT":
                return self._put(type_, rg, name, body or {}, doc)
            raise ArmError(405, "MethodNotAllowed")

    def _delete(self, type_: str, rg: str, name: str, doc: dict[str, Any]):  # type: ignore[no-untyped-def]
        if type_ == "networkinterfaces" and doc["properties"].get("virtualMachine"):
            raise ArmError(400, "NicInUse", "the NIC is attached to a VM")
        if type_ == "publicipaddresses" and doc["properties"].get("ipConfiguration"):
            raise ArmError(400, "PublicIPAddressCannotBeDeleted", "in use; InUse by a NIC")
        if type_ == "disks" and doc.get("managedBy"):
            raise ArmError(409, "OperationNotAllowed", "disk attached")
        if type_ == "proximityplacementgroups":
            if doc["properties"].get("virtualMachines"):
                raise ArmError(409, "OperationNotAllowed",
                               f"proximity placement group {name} still holds a VM")  # fmt: skip
            self.res[type_].pop((rg.lower(), name.lower()), None)
            return 200, None, {}
        if type_ == "virtualmachines":
            doc["properties"]["provisioningState"] = "Deleting"
            self.pending.append(lambda: self._remove_vm(rg, name))
        elif type_ == "networkinterfaces":
            self._remove_nic(rg, name)
        else:
            self.res[type_].pop((rg.lower(), name.lower()), None)
        op = self._op()
        return 202, None, {"Azure-AsyncOperation": op, "Location": op, "Retry-After": "0"}

    def _put(self, type_: str, rg: str, name: str, body: dict[str, Any], doc: Any):  # type: ignore[no-untyped-def]
        rid = self.rid(rg, type_, name)
        new = doc is None
        props = dict(body.get("properties") or {})
        if type_ == "virtualmachines":
            return self._put_vm(rg, name, body, doc)
        if type_ == "proximityplacementgroups":
            held = (doc or {}).get("properties", {}).get("virtualMachines", [])
            ppg = {
                "id": rid, "name": name, "type": "Microsoft.Compute/proximityPlacementGroups",
                "location": body.get("location"), "tags": dict(body.get("tags") or {}),
                "properties": {
                    **props, "virtualMachines": held, "virtualMachineScaleSets": [],
                    "availabilitySets": [],
                },
            }  # fmt: skip
            if body.get("zones"):
                ppg["zones"] = body["zones"]
            self.res[type_][(rg.lower(), name.lower())] = ppg
            return (201 if new else 200), ppg, {}
        out: dict[str, Any] = {
            "id": rid,
            "name": name,
            "type": "/".join(_TYPES[type_]),
            "location": body.get("location"),
            "tags": dict(body.get("tags") or {}),
            "properties": {**props, "provisioningState": "Succeeded"},
        }
        if body.get("zones"):
            out["zones"] = body["zones"]
        if type_ == "networkinterfaces":
            for conf in props.get("ipConfigurations", []):
                conf["id"] = f"{rid}/ipConfigurations/{conf.get('name')}"
                conf.setdefault("properties", {})
                if doc is not None:  # an update keeps the address it has
                    old = (doc["properties"].get("ipConfigurations") or [{}])[0]
                    ip = (old.get("properties") or {}).get("privateIPAddress")
                else:
                    ip = f"10.0.0.{next(self._ips)}"
                conf["properties"]["privateIPAddress"] = ip
                pip = (conf.get("properties") or {}).get("publicIPAddress")
                if pip:
                    ip = self.res["publicipaddresses"].get(
                        (rg.lower(), pip["id"].rsplit("/", 1)[-1].lower())
                    )
                    if ip is None:
                        raise ArmError(400, "InvalidResourceReference", "no such public IP")
                    ip["properties"]["ipConfiguration"] = {"id": conf["id"]}
        if not new:
            out["properties"].update(
                {
                    k: v
                    for k, v in doc["properties"].items()
                    if k in ("virtualMachine", "ipConfiguration")
                }
            )
        self.res[type_][(rg.lower(), name.lower())] = out
        op = self._op(in_progress=1)
        return (
            (201 if new else 200),
            {**out, "properties": {**out["properties"], "provisioningState": "Updating"}},
            {"Azure-AsyncOperation": op},
        )

    def _put_vm(self, rg: str, name: str, body: dict[str, Any], doc: Any):  # type: ignore[no-untyped-def]
        props = body.get("properties") or {}
        size = (props.get("hardwareProfile") or {}).get("vmSize")
        loc = body.get("location", "")
        if not size or not loc:
            raise ArmError(400, "InvalidParameter", "vmSize and location are required")
        if doc is not None:
            doc["tags"] = dict(body.get("tags") or {})
            return 200, self._view(doc, False), {}
        if self.fail_create is not None:
            err, self.fail_create = self.fail_create, None
            raise err
        if self.refuse_after is not None:
            left, err = self.refuse_after
            if left <= 0:
                self.refuse_after = None
                raise err
            self.refuse_after = (left - 1, err)
        group = (props.get("proximityPlacementGroup") or {}).get("id", "")
        ppg = None
        if group:
            ppg = self.res["proximityplacementgroups"].get(
                (rg.lower(), group.rsplit("/", 1)[-1].lower())
            )
            if ppg is None:
                raise ArmError(404, "NotFound", f"proximity placement group {group} not found")
        known = [  # ARM compares locations case-insensitively ("WestUS3")
            s for s in self.skus
            if s["name"] == size and loc.lower() in [x.lower() for x in s["locations"]]
        ]  # fmt: skip
        if not known:
            raise ArmError(409, "SkuNotAvailable", f"{size} is not available in {loc}")
        nics = []
        for ref in (props.get("networkProfile") or {}).get("networkInterfaces", []):
            nic = self.res["networkinterfaces"].get(
                (rg.lower(), ref["id"].rsplit("/", 1)[-1].lower())
            )
            if nic is None:
                raise ArmError(400, "InvalidResourceReference", f"NIC {ref['id']} not found")
            nics.append(nic)
        rid = self.rid(rg, "virtualMachines", name)
        stored_props = json.loads(json.dumps(props))
        stored_props.update(
            {
                "provisioningState": "Creating",
                "vmId": f"vm-{next(self._ids)}",
                "timeCreated": datetime.now(UTC).isoformat(),
            }
        )
        vm: dict[str, Any] = {
            "id": rid,
            "name": name,
            "type": "Microsoft.Compute/virtualMachines",
            "location": loc,
            "tags": dict(body.get("tags") or {}),
            "properties": stored_props,
            "_statuses": [{"code": "ProvisioningState/creating", "level": "Info"}],
            "_power": "",
        }
        if body.get("zones"):
            vm["zones"] = body["zones"]
        if body.get("identity"):
            vm["identity"] = body["identity"]
        self.res["virtualmachines"][(rg.lower(), name.lower())] = vm
        for nic in nics:
            nic["properties"]["virtualMachine"] = {"id": rid}
        osd = (props.get("storageProfile") or {}).get("osDisk") or {}
        if osd.get("name"):  # Azure does not copy the VM's tags to the disk it creates
            self.res["disks"][(rg.lower(), osd["name"].lower())] = {
                "id": self.rid(rg, "disks", osd["name"]),
                "name": osd["name"],
                "type": "Microsoft.Compute/disks",
                "location": loc,
                "managedBy": rid,
                "tags": {},
                "properties": {"diskState": "Attached", "diskSizeGB": osd.get("diskSizeGB")},
            }
        failure, self.fail_later = self.fail_later, None
        room = self.capacity.get(size)
        if room is not None:
            if room <= 0 and failure is None:
                code = "OverconstrainedAllocationRequest" if ppg else "AllocationFailed"
                failure = (code, ALLOCATION_ERRORS[code])
            else:
                self.capacity[size] = room - 1
        if ppg is not None:
            ppg["properties"].setdefault("virtualMachines", []).append({"id": rid})

        def finish_create() -> None:
            if failure is None:
                vm["properties"]["provisioningState"] = "Succeeded"
                vm["_statuses"] = [{"code": "ProvisioningState/succeeded", "level": "Info"}]
                vm["_power"] = "PowerState/running"
            else:
                code, message = failure
                vm["properties"]["provisioningState"] = "Failed"
                vm["_statuses"] = [
                    {
                        "code": f"ProvisioningState/failed/{code}",
                        "level": "Error",
                        "displayStatus": "Provisioning failed",
                        "message": message,
                    }
                ]

        self.pending.append(finish_create)
        problem = {"code": failure[0], "message": failure[1]} if failure else None
        op = self._op("Failed" if failure else "Succeeded", problem)
        return 201, self._view(vm, False), {"Azure-AsyncOperation": op}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _serve(self) -> None:
                u = urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                try:
                    status, doc, headers = fake.handle(
                        self.command, u.path, parse_qs(u.query), body, self.headers
                    )
                except ArmError as e:
                    status, doc, headers = (
                        e.status,
                        {"error": {"code": e.code, "message": e.message}},
                        {},
                    )
                data = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_DELETE = do_PATCH = do_POST = _serve

        return Handler
