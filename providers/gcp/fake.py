"""A loopback REST fake of the Compute Engine API and the Cloud Billing Catalog.

stdlib ThreadingHTTPServer on 127.0.0.1:0; the real google-cloud-compute and
google-cloud-billing clients talk to it. It models what the adapter relies on: aggregated
lists and SKU lists with paging, list filters (`name eq "re"`, `labels.k = "v"`, OR'ed
`operationType = "x"`), instances.insert with requestId dedup and name conflicts,
operations that finish on a later read (with delayed errors), preemption and deletion as
zone operations. Prices are us-central1 figures from shared/data/catalog/gcp_vms.csv.
Risk data: advice.capacity (`advice`, `fail_advice`) and advice.capacityHistory
(`history`, `fail_history`), in compute_v1's response shapes.

Gangs: instances.bulkInsert (count, minCount, perInstanceProperties, instanceProperties
with short names; all or nothing: a zone short of capacity fails the operation with
ZONE_RESOURCE_POOL_EXHAUSTED and perLocationStatus createdVmCount = deletedVmCount = what it
held), regional resource policies (groupPlacementPolicy; insert, get, list, delete, refused
while a VM uses one), setLabels with the label fingerprint, and `capacity` (zone -> how many
more VMs it takes). The shapes are google-cloud-compute's models (BulkInsertInstanceResource,
BulkInsertOperationStatus, ResourcePolicy) and the errors the REST reference documents
(409 alreadyExists, 412 conditionNotMet for a stale fingerprint, 400
resourceInUseByAnotherResource).

Pointing the real SDK at it: `fake = FakeGcp()` listens at once on `fake.url`; configure
`[providers.gcp]` with `project = "spotwise-test"` (PROJECT), `regions = ["us-central1"]`,
`api_endpoint` and `billing_endpoint` both `fake.url`, and `credentials = "anonymous"` (no
token is fetched or sent). GcpProvider's compute_v1 and billing_v1 clients (REST transport)
then talk only to the fake; tests/support/gcp_harness.py `settings()` is the whole recipe, and
a person can keep one running from a Python shell the same way. `fake.close()` stops it.
One module, over 600 lines: one HTTP handler answers every route (instances, bulkInsert,
zone operations, resource policies, the Billing Catalog) over one shared state, which the
tests' injections reach through one object.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from providers.gcp.fake_catalog import (
    ACCELERATORS,
    GOING_AWAY,
    IMAGE_FAMILIES,
    IMAGE_PROJECT,
    MACHINE_TYPES,
    OPS_PAGE,
    PROJECT,
    ZONES,
    default_skus,
)


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_TERM = re.compile(r'([A-Za-z][\w.-]*)\s*(=|eq|!=|ne)\s*"([^"]*)"')


def matches(flt: str, item: dict[str, Any]) -> bool:
    """A subset of GCE's list filters: terms `f = "v"` / `f eq "regex"`, AND or OR'ed."""
    terms = _TERM.findall(flt or "")
    if not terms:
        return True

    def get(path: str) -> str:
        cur: Any = item
        if path.startswith("labels."):
            return str(item.get("labels", {}).get(path[7:], ""))
        for part in path.split("."):
            cur = cur.get(part, "") if isinstance(cur, dict) else ""
        return str(cur)

    results = []
    for field, op, value in terms:
        v = get(field)
        ok = v == value if op in ("=", "!=") else re.fullmatch(value, v) is not None
        results.append(ok if op in ("=", "eq") else not ok)
    return any(results) if " OR " in flt else all(results)


class FakeGcp:
    def __init__(self, page_size: int = 3, sku_page_size: int = 7) -> None:
        self.page_size = page_size
        self.sku_page_size = sku_page_size
        self.skus = default_skus()
        self.lock = threading.RLock()
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.ops: dict[tuple[str, str], dict[str, Any]] = {}
        self.request_ids: dict[str, tuple[str, str]] = {}
        self.log: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.auth_headers: list[str] = []
        self.quota_headers: list[str] = []  # x-goog-user-project of each request
        self.ops_returned = 0  # operations the zoneOperations.list answers carried
        # projects.testIamPermissions: the permissions the caller holds (None: all asked).
        self.granted: set[str] | None = None
        # Image families that exist, per image project (images.getFromFamily).
        self.images: dict[tuple[str, str], dict[str, Any]] = {
            (IMAGE_PROJECT, f): _image(f) for f in IMAGE_FAMILIES
        }
        # zone -> (code, message, http status, reads before the operation fails)
        self.fail_insert: dict[str, tuple[str, str, int, int]] = {}
        # zone -> (http status, reason, message): a synchronous insert error
        self.reject_insert: dict[str, tuple[int, str, str]] = {}
        self.stockout: dict[str, tuple[str, str, int, int]] = {}  # like fail_insert, lasting
        # zone -> how many more VMs it takes (absent: no limit); a bulk insert it cannot
        # complete fails whole, after creating (and deleting) what fitted.
        self.capacity: dict[str, int] = {}
        # (region, name) -> resource policy (compact placement of gangs)
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.unreachable: set[str] = set()  # zones whose scope answers with a warning
        self.fail_skus = False
        self.advice: dict[tuple[str, str], tuple[float, str]] = {}
        self.advice_calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_advice = False
        # advice.capacityHistory: (zone, machine type) -> daily preemption shares, oldest first
        self.history: dict[tuple[str, str], list[float]] = {}
        self.history_calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_history: tuple[int, str] | None = None  # (HTTP status, reason) to answer
        self._ids = itertools.count(1000)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.instances.clear()
            self.ops.clear()
            self.request_ids.clear()
            self.log.clear()
            self.fail_insert.clear()
            self.reject_insert.clear()
            self.unreachable.clear()
            self.stockout.clear()
            self.capacity.clear()
            self.policies.clear()
            self.fail_skus = False
            self.advice, self.advice_calls, self.fail_advice = {}, [], False
            self.history, self.history_calls, self.fail_history = {}, [], None
            self.skus = default_skus()
            self.granted = None
            self.quota_headers.clear()

    # ------------------------------------------------------------------ test controls

    def _op(self, zone: str, op_type: str, name: str, status: str = "DONE", **extra: Any) -> dict:
        n = next(self._ids)
        now = _rfc3339(datetime.now(UTC))
        base = f"{self.url}/compute/v1/projects/{PROJECT}/zones/{zone}"
        op = {
            "kind": "compute#operation", "id": str(n), "name": f"operation-{n}",
            "zone": base, "operationType": op_type, "targetLink": f"{base}/instances/{name}",
            "targetId": str(n), "status": status, "progress": 100 if status == "DONE" else 0,
            "insertTime": now, "startTime": now, "selfLink": f"{base}/operations/operation-{n}",
        }  # fmt: skip
        if status == "DONE":
            op["endTime"] = now
        op.update(extra)
        self.ops[(zone, str(op["name"]))] = op
        return op

    def preempt(self, name: str, action: str = "DELETE") -> None:
        """GCE reclaims a Spot VM: a compute.instances.preempted operation, then the VM is
        TERMINATED (STOP) or gone (DELETE). The operation is a system event as Compute
        Engine's "Detect if a VM was preempted" shows it (`gcloud compute operations list
        --filter operationType=compute.instances.preempted`: NAME systemevent-..., TYPE
        compute.instances.preempted, HTTP_STATUS 200, STATUS DONE), with the fields of
        compute_v1.Operation."""
        with self.lock:
            (zone, _), inst = next((k, v) for k, v in self.instances.items() if k[1] == name)
            op = self._op(zone, "compute.instances.preempted", name, user="system",
                          statusMessage="Instance was preempted.")  # fmt: skip
            systemevent = f"systemevent-{op['id']}-preempted"
            del self.ops[(zone, str(op["name"]))]
            op["name"] = systemevent
            op["selfLink"] = op["selfLink"].rsplit("/", 1)[0] + "/" + systemevent
            self.ops[(zone, systemevent)] = op
            if action == "DELETE":
                del self.instances[(zone, name)]
            else:
                inst["status"] = "TERMINATED"

    def guest_shutdown(self, name: str) -> None:
        """The startup-script finished and powered off: TERMINATED, no preemption."""
        with self.lock:
            (zone, _), inst = next((k, v) for k, v in self.instances.items() if k[1] == name)
            inst["status"] = "TERMINATED"
            self._op(zone, "compute.instances.guestTerminate", name, user="system")

    def set_status(self, name: str, status: str) -> None:
        """A VM in any compute_v1.Instance.Status (a preemption passes PENDING_STOP,
        STOPPING and DEPROVISIONING; flex-start waits in PENDING)."""
        with self.lock:
            inst = next(v for k, v in self.instances.items() if k[1] == name)
            inst["status"] = status

    def other_operations(self, zone: str, count: int) -> None:
        """Operations of other VMs in the zone (a busy project): deletes and preemptions."""
        with self.lock:
            for i in range(count):
                kind = "compute.instances.preempted" if i % 2 else "delete"
                self._op(zone, kind, f"someone-else-{i}", user="system")

    def add_instance(self, zone: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
        """A VM created behind the adapter's back (a leak)."""
        with self.lock:
            return self._create(
                zone,
                {
                    "name": name,
                    "labels": labels,
                    "machineType": f"zones/{zone}/machineTypes/n1-standard-4",
                    "scheduling": {"provisioningModel": "SPOT"},
                },
                "RUNNING",
            )

    def requests(self, method: str, pattern: str) -> list[tuple[str, str, dict, Any]]:
        with self.lock:
            return [r for r in self.log if r[0] == method and re.search(pattern, r[1])]

    # ------------------------------------------------------------------ model

    def _create(self, zone: str, body: dict[str, Any], status: str) -> dict[str, Any]:
        base = f"{self.url}/compute/v1/projects/{PROJECT}/zones/{zone}"
        inst = dict(body)
        inst.update(
            kind="compute#instance", id=str(next(self._ids)), zone=base, status=status,
            creationTimestamp=_rfc3339(datetime.now(UTC)),
            selfLink=f"{base}/instances/{body['name']}", _reads=0,
        )  # fmt: skip
        mt = inst.get("machineType", "")
        if not mt.startswith("http"):
            if "/" not in mt:  # instanceProperties name it alone
                mt = f"zones/{zone}/machineTypes/{mt}"
            inst["machineType"] = f"{self.url}/compute/v1/projects/{PROJECT}/{mt}"
        inst["labelFingerprint"] = _fingerprint(inst.get("labels") or {})
        self.instances[(zone, body["name"])] = inst
        return inst

    def _taken(self, zone: str, n: int) -> int:
        """How many of `n` new VMs the zone takes now (its capacity counts down)."""
        left = self.capacity.get(zone)
        if left is None:
            return n
        got = min(n, max(0, left))
        self.capacity[zone] = left - got
        return got

    def _policies_missing(self, zone: str, paths: list[str]) -> str | None:
        region = zone.rsplit("-", 1)[0]
        for path in paths:
            name = str(path).rsplit("/", 1)[-1]
            if (region, name) not in self.policies:
                return f"projects/{PROJECT}/regions/{region}/resourcePolicies/{name}"
        return None

    def _bulk_insert(self, zone: str, body: dict[str, Any], rid: str) -> tuple[int, dict]:
        """instances.bulkInsert: all of `count` or (minCount = count) none."""
        if rid and rid in self.request_ids:
            return 200, self.ops[self.request_ids[rid]]
        count, least = int(body.get("count") or 0), int(body.get("minCount") or 0)
        per = body.get("perInstanceProperties") or {}
        props = dict(body.get("instanceProperties") or {})
        names = list(per)
        if count < 1 or len(names) != count or least > count:
            return _error(400, "invalid", "Invalid value for field 'resource.count'")
        mt = str(props.get("machineType", "")).rsplit("/", 1)[-1]
        if mt not in {m[0] for m in MACHINE_TYPES.get(zone, [])}:
            return _error(
                404, "notFound", f"The resource 'zones/{zone}/machineTypes/{mt}' was not found"
            )
        for name in names:
            if (zone, name) in self.instances:
                return _error(409, "alreadyExists", f"The resource '{name}' already exists")
        missing = self._policies_missing(zone, props.get("resourcePolicies") or [])
        if missing:
            return _error(404, "notFound", f"The resource '{missing}' was not found")
        op = self._op(zone, "bulkInsert", names[0], status="RUNNING", user="spotwise")
        op["targetLink"] = f"{self.url}/compute/v1/projects/{PROJECT}/zones/{zone}/instances"
        op["clientOperationId"] = rid
        held = self._taken(zone, count)
        stock = self.fail_insert.pop(zone, None) or self.stockout.get(zone)
        if stock is not None:
            held = 0
        status = {"targetVmCount": count, "createdVmCount": held, "status": "DONE"}
        if held < (least or count):
            code, msg, http, reads = stock or (
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                f"The zone 'projects/{PROJECT}/zones/{zone}' does not have enough resources "
                f"available to fulfill the request.",
                503,
                0,
            )
            status.update(deletedVmCount=held, failedToCreateVmCount=count - held)
            if self.capacity.get(zone) is not None:
                self.capacity[zone] += held  # rolled back
            op["_fail"] = [code, msg, http, reads]
        else:
            op["_finish_after"] = 1
            for name in names:
                vm = {**props, "name": name}
                vm["disks"] = [
                    {**d, "initializeParams": {
                        **(d.get("initializeParams") or {}),
                        "diskType": f"zones/{zone}/diskTypes/"
                        + str((d.get("initializeParams") or {}).get("diskType", "")).rsplit(
                            "/", 1)[-1]}}
                    for d in props.get("disks") or []
                ]  # fmt: skip
                self._create(zone, vm, "PROVISIONING")
        op["instancesBulkInsertOperationMetadata"] = {
            "perLocationStatus": {f"zones/{zone}": status}
        }
        if rid:
            self.request_ids[rid] = (zone, op["name"])
        return 200, op

    def _set_labels(self, zone: str, name: str, body: dict[str, Any]) -> tuple[int, dict]:
        inst = self.instances.get((zone, name))
        if inst is None:
            return _error(404, "notFound", f"The resource '{_path(zone, name)}' was not found")
        if body.get("labelFingerprint") != inst.get("labelFingerprint"):
            why = "Labels fingerprint either invalid or resource labels have changed"
            return _error(412, "conditionNotMet", why)
        inst["labels"] = dict(body.get("labels") or {})
        inst["labelFingerprint"] = _fingerprint(inst["labels"])
        return 200, self._op(zone, "setLabels", name, user="spotwise")

    def _policy_route(
        self, method: str, region: str, name: str | None, body: Any, q: dict[str, list[str]]
    ) -> tuple[int, Any]:
        """resourcePolicies: insert, get, list (with a name filter), delete."""
        if method == "POST" and name is None:
            pname = str((body or {}).get("name", ""))
            if (region, pname) in self.policies:
                return _error(409, "alreadyExists", f"The resource '{pname}' already exists")
            if not (body or {}).get("groupPlacementPolicy"):
                return _error(400, "invalid", "A resource policy needs a policy")
            base = f"{self.url}/compute/v1/projects/{PROJECT}/regions/{region}"
            self.policies[(region, pname)] = {
                **(body or {}), "kind": "compute#resourcePolicy", "status": "READY",
                "region": base, "selfLink": f"{base}/resourcePolicies/{pname}",
                "creationTimestamp": _rfc3339(datetime.now(UTC)),
            }  # fmt: skip
            return 200, {"kind": "compute#operation", "name": f"operation-p-{pname}",
                         "operationType": "insert", "status": "DONE"}  # fmt: skip
        if method == "GET" and name is None:
            flt = q.get("filter", [""])[0]
            items = [v for (r, _), v in sorted(self.policies.items()) if r == region]
            return 200, {"items": [i for i in items if matches(flt, i)]}
        doc = self.policies.get((region, name or ""))
        if doc is None:
            return _error(404, "notFound", f"The resource 'projects/{PROJECT}/regions/{region}/"
                          f"resourcePolicies/{name}' was not found")  # fmt: skip
        if method == "GET":
            return 200, doc
        if method == "DELETE":
            users = [
                n for (_, n), v in self.instances.items()
                if any(str(x).rsplit("/", 1)[-1] == name for x in v.get("resourcePolicies") or [])
            ]  # fmt: skip
            if users:
                return _error(
                    400, "resourceInUseByAnotherResource",
                    f"The resource_policy resource '{name}' is already being used by "
                    f"'{users[0]}'",
                )  # fmt: skip
            del self.policies[(region, name or "")]
            return 200, {"kind": "compute#operation", "operationType": "delete", "status": "DONE"}
        return _error(404, "notFound", f"no route {method} resourcePolicies")

    def _insert(self, zone: str, body: dict[str, Any], rid: str) -> tuple[int, dict[str, Any]]:
        if rid and rid in self.request_ids:
            return 200, self.ops[self.request_ids[rid]]
        name = body.get("name", "")
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        for k, v in (body.get("labels") or {}).items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", k) or not re.fullmatch(
                r"[a-z0-9_-]{0,63}", v
            ):
                return _error(400, "invalid", f"Invalid value for field 'resource.labels': '{k}'")
        mt = body.get("machineType", "").rsplit("/", 1)[-1]
        if mt not in {m[0] for m in MACHINE_TYPES.get(zone, [])}:
            return _error(
                404, "notFound", f"The resource 'zones/{zone}/machineTypes/{mt}' was not found"
            )
        if (zone, name) in self.instances:
            return _error(409, "alreadyExists", f"The resource '{name}' already exists")
        if zone in self.reject_insert:
            status, reason, msg = self.reject_insert.pop(zone)
            return _error(status, reason, msg)
        missing = self._policies_missing(zone, body.get("resourcePolicies") or [])
        if missing:
            return _error(404, "notFound", f"The resource '{missing}' was not found")
        fail = self.fail_insert.pop(zone, None) or self.stockout.get(zone)
        if fail is None and not self._taken(zone, 1):
            fail = ("ZONE_RESOURCE_POOL_EXHAUSTED", f"The zone 'projects/{PROJECT}/zones/"
                    f"{zone}' does not have enough resources available.", 503, 0)  # fmt: skip
        if fail is not None:
            op = self._op(zone, "insert", name, status="RUNNING", user="spotwise")
            op["_fail"] = list(fail)  # a copy: the delay counts down per operation
        else:
            op = self._op(zone, "insert", name, status="RUNNING", user="spotwise")
            op["_finish_after"] = 1
            self._create(zone, body, "PROVISIONING")
        if rid:
            self.request_ids[rid] = (zone, op["name"])
        return 200, op

    def _read_op(self, op: dict[str, Any]) -> dict[str, Any]:
        """Operations finish on a later read; a failing one carries its error then."""
        if op["status"] == "DONE":
            return op
        if "_fail" in op:
            code, msg, status, reads = op["_fail"]
            if reads > 0:
                op["_fail"][3] = reads - 1
                return op
            op.update(
                status="DONE", endTime=_rfc3339(datetime.now(UTC)), progress=100,
                error={"errors": [{"code": code, "message": msg}]},
                httpErrorStatusCode=status, httpErrorMessage="SERVICE UNAVAILABLE",
            )  # fmt: skip
            return op
        op["_finish_after"] -= 1
        if op["_finish_after"] < 0:
            op.update(status="DONE", endTime=_rfc3339(datetime.now(UTC)), progress=100)
        return op

    def _read_instance(self, inst: dict[str, Any]) -> dict[str, Any]:
        if inst["status"] in ("PROVISIONING", "STAGING"):
            inst["_reads"] += 1
            if inst["_reads"] > 1:
                inst["status"] = "RUNNING"
        return inst

    def _delete(self, zone: str, name: str, rid: str) -> tuple[int, dict[str, Any]]:
        if rid and rid in self.request_ids and self.request_ids[rid] in self.ops:
            return 200, self.ops[self.request_ids[rid]]
        inst = self.instances.get((zone, name))
        if inst is not None and inst["status"] in GOING_AWAY:
            return _error(
                400, "resourceNotReady", f"The resource '{_path(zone, name)}' is not ready"
            )
        if (zone, name) not in self.instances:
            return _error(
                404,
                "notFound",
                f"The resource '{_path(zone, name)}' was not found",
            )
        del self.instances[(zone, name)]
        op = self._op(zone, "delete", name, user="spotwise")
        if rid:
            self.request_ids[rid] = (zone, op["name"])
        return 200, op

    # ------------------------------------------------------------------ HTTP

    def _aggregated(self, kind: str, q: dict[str, list[str]]) -> dict[str, Any]:
        flt = q.get("filter", [""])[0]
        key = {"machineTypes": "machineTypes", "acceleratorTypes": "acceleratorTypes",
               "instances": "instances"}[kind]  # fmt: skip
        pairs: list[tuple[str, dict[str, Any] | None]] = []
        for zone in ZONES:
            if kind == "instances":
                items = [
                    _public(self._read_instance(v))
                    for (z, _), v in sorted(self.instances.items())
                    if z == zone
                ]
            elif kind == "machineTypes":
                items = [_machine(zone, *m) for m in MACHINE_TYPES.get(zone, [])]
            else:
                items = [_accel(zone, *a) for a in ACCELERATORS.get(zone, [])]
            items = [i for i in items if matches(flt, i)]
            if zone in self.unreachable:
                pairs.append((zone, None))
            pairs.extend((zone, i) for i in items)
        size = min(self.page_size, int(q.get("maxResults", ["500"])[0]))
        start = int(q.get("pageToken", ["0"])[0] or 0)
        page = pairs[start : start + size]
        out: dict[str, Any] = {}
        for zone, item in page:
            scoped = out.setdefault(f"zones/{zone}", {})
            if item is None:
                scoped["warning"] = {"code": "UNREACHABLE", "message": f"zone {zone} unreachable"}
            else:
                scoped.setdefault(key, []).append(item)
        doc: dict[str, Any] = {"kind": f"compute#{kind}AggregatedList", "items": out}
        if start + size < len(pairs):
            doc["nextPageToken"] = str(start + size)
        return doc

    def _skus(self, q: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if self.fail_skus:
            return _error(503, "backendError", "The service is currently unavailable.")
        start = int(q.get("pageToken", ["0"])[0] or 0)
        page = self.skus[start : start + self.sku_page_size]
        doc: dict[str, Any] = {"skus": page, "nextPageToken": ""}
        if start + self.sku_page_size < len(self.skus):
            doc["nextPageToken"] = str(start + self.sku_page_size)
        return 200, doc

    def _advice(self, region: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """advice.capacity, in compute_v1's CapacityAdviceResponse shape: one recommendation
        whose scores (obtainability, estimatedUptime) and shard (zone, machineType) answer the
        asked zone and machine type. `advice` maps (zone, machine type) to (obtainability,
        uptime text); an unlisted pair answers no recommendation."""
        self.advice_calls.append((region, body))
        if self.fail_advice:
            return _error(403, "forbidden", "Required 'compute.advice.capacity' permission")
        zones = [z.get("zone", "") for z in body.get("distributionPolicy", {}).get("zones", [])]
        selections = body.get("instanceFlexibilityPolicy", {}).get("instanceSelections", {})
        machines = [m for sel in selections.values() for m in sel.get("machineTypes", [])]
        recs = []
        for zone in zones:
            zone_name = zone.rsplit("/", 1)[-1]
            for machine in machines:
                hit = self.advice.get((zone_name, machine))
                if hit is not None:
                    recs.append({
                        "scores": {"obtainability": hit[0], "estimatedUptime": hit[1]},
                        "shards": [{"zone": zone, "machineType": machine, "instanceCount": 1,
                                    "provisioningModel": "SPOT"}],
                    })  # fmt: skip
        return 200, {"recommendations": recs[:1]}

    def _history(self, region: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """advice.capacityHistory, in compute_v1's CapacityHistoryResponse shape (and the REST
        reference's: machineType, location as a zone URL, preemptionHistory of {interval:
        {startTime, endTime}, preemptionRate}), one record a day ending today, days cut at
        midnight Pacific Time (08:00Z). `history` maps (zone, machine type) to the daily
        shares; an unlisted pair answers no records; `fail_history` answers an error."""
        self.history_calls.append((region, body))
        if self.fail_history is not None:
            status, reason = self.fail_history
            return _error(status, reason, f"capacityHistory refused ({reason})")
        machine = body.get("instanceProperties", {}).get("machineType", "")
        zone = body.get("locationPolicy", {}).get("location", "").rsplit("/", 1)[-1]
        shares = self.history.get((zone, machine), [])
        today = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0)
        days = [today - timedelta(days=len(shares) - 1 - i) for i in range(len(shares))]
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        return 200, {
            "machineType": machine,
            "location": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}",
            "preemptionHistory": [
                {"interval": {"startTime": d.strftime(stamp),
                              "endTime": (d + timedelta(days=1)).strftime(stamp)},
                 "preemptionRate": r}
                for d, r in zip(days, shares, strict=True)
            ],
        }  # fmt: skip

    def route(self, method: str, path: str, q: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        with self.lock:
            self.log.append((method, path, q, body))
            if path == "/v1/services/6F81-5844-456A/skus" and method == "GET":
                return self._skus(q)
            m = re.fullmatch(r"/v1/projects/([^/:]+):testIamPermissions", path)
            if m and method == "POST":
                asked = list((body or {}).get("permissions") or [])
                held = [p for p in asked if self.granted is None or p in self.granted]
                return 200, ({"permissions": held} if held else {})
            m = re.fullmatch(r"/compute/v1/projects/([^/]+)/global/images/family/([^/]+)", path)
            if m and method == "GET":
                image = self.images.get((m.group(1), m.group(2)))
                if image is None:
                    return _error(404, "notFound", f"The resource 'projects/{m.group(1)}/global/"
                                  f"images/family/{m.group(2)}' was not found")  # fmt: skip
                return 200, image
            m = re.fullmatch(r"/compute/v1/projects/([^/]+)/regions/([^/]+)/advice/capacity", path)
            if m and method == "POST":
                return self._advice(m.group(2), body or {})
            m = re.fullmatch(
                r"/compute/v1/projects/([^/]+)/regions/([^/]+)/advice/capacityHistory", path
            )
            if m and method == "POST":
                return self._history(m.group(2), body or {})
            m = re.fullmatch(r"/compute/v1/projects/([^/]+)/aggregated/(\w+)", path)
            if m and method == "GET":
                return 200, self._aggregated(m.group(2), q)
            m = re.fullmatch(
                r"/compute/v1/projects/([^/]+)/regions/([^/]+)/resourcePolicies(?:/([^/]+))?", path
            )
            if m:
                return self._policy_route(method, m.group(2), m.group(3), body, q)
            m = re.fullmatch(
                r"/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)/setLabels", path
            )
            if m and method == "POST":
                return self._set_labels(m.group(2), m.group(3), body or {})
            m = re.fullmatch(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/(\w+)(?:/([^/]+))?", path)
            if not m:
                return _error(404, "notFound", f"no route {method} {path}")
            zone, coll, name = m.group(2), m.group(3), m.group(4)
            rid = q.get("requestId", [""])[0]
            flt = q.get("filter", [""])[0]
            if coll == "instances":
                if method == "POST" and name == "bulkInsert":
                    return self._bulk_insert(zone, body or {}, rid)
                if method == "POST" and name is None:
                    return self._insert(zone, body or {}, rid)
                if method == "GET" and name is None:
                    items = [
                        _public(self._read_instance(v))
                        for (z, _), v in sorted(self.instances.items())
                        if z == zone
                    ]
                    return 200, {"items": [i for i in items if matches(flt, i)]}
                if method == "GET":
                    inst = self.instances.get((zone, name))
                    if inst is None:
                        return _error(
                            404,
                            "notFound",
                            f"The resource '{_path(zone, name)}' was not found",
                        )
                    return 200, _public(self._read_instance(inst))
                if method == "DELETE":
                    return self._delete(zone, name, rid)
            if coll == "operations":
                if method == "GET" and name is None:
                    ops = [_public(self._read_op(v)) for (z, _), v in self.ops.items() if z == zone]
                    items = [o for o in ops if matches(flt, o)]
                    size = min(OPS_PAGE, int(q.get("maxResults", [str(OPS_PAGE)])[0]))
                    start = int(q.get("pageToken", ["0"])[0] or 0)
                    doc: dict[str, Any] = {"items": items[start : start + size]}
                    self.ops_returned += len(doc["items"])
                    if start + size < len(items):
                        doc["nextPageToken"] = str(start + size)
                    return 200, doc
                if method == "GET":
                    op = self.ops.get((zone, name))
                    if op is None:
                        return _error(404, "notFound", f"operation {name} not found")
                    return 200, _public(self._read_op(op))
            return _error(404, "notFound", f"no route {method} {path}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                u = urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                auth = self.headers.get("Authorization")
                if auth:
                    fake.auth_headers.append(auth)
                quota = self.headers.get("x-goog-user-project")
                if quota:
                    fake.quota_headers.append(quota)
                status, doc = fake.route(method, u.path, parse_qs(u.query), body)
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        return Handler


def _image(family: str) -> dict[str, Any]:
    """An images.getFromFamily answer (compute_v1.Image's fields)."""
    return {
        "kind": "compute#image", "name": f"{family}-v20260512", "family": family,
        "status": "READY", "architecture": "X86_64",
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{IMAGE_PROJECT}/global/"
                    f"images/{family}-v20260512",
    }  # fmt: skip


def _fingerprint(labels: dict[str, str]) -> str:
    import base64
    import hashlib

    raw = hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).digest()[:8]
    return base64.b64encode(raw).decode()


def _public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def _error(status: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {
        "error": {"code": status, "message": message,
                  "errors": [{"message": message, "domain": "global", "reason": reason}]}
    }  # fmt: skip


def _machine(zone: str, name: str, cpus: int, mem: int, acc: str, count: int) -> dict[str, Any]:
    d: dict[str, Any] = {
        "kind": "compute#machineType", "name": name, "guestCpus": cpus, "memoryMb": mem,
        "zone": zone, "description": f"{cpus} vCPUs, {mem / 1024:g} GB RAM",
    }  # fmt: skip
    if acc:
        d["accelerators"] = [{"guestAcceleratorType": acc, "guestAcceleratorCount": count}]
    return d


def _accel(zone: str, name: str, max_cards: int, desc: str) -> dict[str, Any]:
    return {
        "kind": "compute#acceleratorType", "name": name, "description": desc,
        "maximumCardsPerInstance": max_cards,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}",
    }  # fmt: skip


def _path(zone: str, name: str) -> str:
    return f"projects/{PROJECT}/zones/{zone}/instances/{name}"
