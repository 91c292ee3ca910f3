"""Instances: launch (insert, not waited on; a gang's bulkInsert, gangs.py), describe
(instances + zone operations), terminate (delete), list by label, find by token.

Stateless: the instance name is derived from the attempt token, so every call finds its VM
again from the token or the persisted ref (name + zone). What the instance list cannot tell
- a launch that failed inside its operation, a preemption, our own deletion - the zone
operations do: describe reads them for refs that are gone or stopped.
One module, over 600 lines: a single VM and a gang's bulkInsert share the token, the
adoption, the operation reading and the end reasons (gangs.py holds the gang's own parts).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc

from providers.base import (
    TAG_NODE,
    TAG_OWNER,
    Capabilities,
    EndReason,
    FatalError,
    Instance,
    InstanceState,
    LaunchRejected,
    LaunchRequest,
    Market,
    ResourceKind,
    ResourceRef,
    TaggedResource,
    not_found,
    pool_key,
)
from providers.gcp import ttl
from providers.gcp.api import CLOUD, Api
from providers.gcp.errors import api_codes, operation_failure, translate
from providers.gcp.gangs import (
    MAX_GANG,
    RDZV_PORT,
    Placement,
    bulk_failure,
    bulk_request_id,
    instance_properties,
    label_nodes,
    node_name,
    node_of_name,
)
from providers.gcp.machine_series import boot_disk_type, takes_compact_placement
from providers.gcp.price_sheet import parse_shape, shape_name
from providers.gcp.settings import region_of_zone
from providers.gcp.startup import build_startup_script

# uuid5 namespace of our requestIds (any fixed UUID; this one is uuid5(URL, "spotwise:gcp")).
REQUEST_NS = uuid.uuid5(uuid.NAMESPACE_URL, "spotwise:gcp")
OP_PREEMPTED = "compute.instances.preempted"
# Operation types that end an instance, and what they mean for us.
_ENDING_OPS = {
    OP_PREEMPTED: EndReason.INTERRUPTED,
    "compute.instances.hostError": EndReason.INTERRUPTED,
    "compute.instances.terminateOnHostMaintenance": EndReason.INTERRUPTED,
    "compute.instances.guestTerminate": EndReason.EXITED,
    "delete": EndReason.TERMINATED,
    "stop": EndReason.TERMINATED,
}
# compute_v1.Instance.Status, every value (a test reads the enum from the installed
# google-cloud-compute, so a new status fails it until it is placed here).
_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    # Flex-start and queued requests wait for capacity in PENDING (DWS): not yet a VM.
    "PENDING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.RUNNING,
    # On its way down (a preemption goes RUNNING -> PENDING_STOP/STOPPING -> ...): the
    # zone operations say why, so it never reads as a new launch.
    "PENDING_STOP": InstanceState.ENDED,
    "STOPPING": InstanceState.ENDED,
    "DEPROVISIONING": InstanceState.ENDED,
    "STOPPED": InstanceState.ENDED,
    "TERMINATED": InstanceState.ENDED,
    "SUSPENDING": InstanceState.ENDED,
    "SUSPENDED": InstanceState.ENDED,
}
# GCE answers DELETE with 400 resourceNotReady while the VM is busy going away (stopping
# after a preemption, an earlier delete in flight): "The resource '...' is not ready"
# (googleapis/google-api-python-client#485; the error body as in opstrace/opstrace#1218).
NOT_READY = "RESOURCE_NOT_READY"
# Names per zoneOperations.list filter (one regular expression on targetLink).
OPS_NAMES_PER_CALL = 50
# Instance names: [a-z]([-a-z0-9]{0,61}[a-z0-9])?
_SLUG = re.compile(r"[^a-z0-9]+")


def instance_name(token: str) -> str:
    """The deterministic VM name of an attempt token: readable prefix + hash, <= 63 chars."""
    slug = _SLUG.sub("-", token.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    return f"sw-{slug}-{digest}" if slug else f"sw-{digest}"


def request_id(token: str, action: str = "insert") -> str:
    """GCE requestId: a UUID, deterministic per (action, token), so a retry is deduplicated."""
    return str(uuid.uuid5(REQUEST_NS, f"{action}:{token}"))


def make_scope(instance_type: str, market: Market, bulk: str = "") -> str:
    """What a ref must carry for describe to name the pool of a VM that never existed
    (a launch failed inside its operation): 'n1-standard-8+1xnvidia-tesla-t4@spot', and for
    a gang's VM the bulk operation to read ('...@spot@bulk-<requestId>')."""
    out = f"{instance_type}@{Market(market).value}"
    return f"{out}@{bulk}" if bulk else out


def parse_scope(scope: str) -> tuple[str, Market]:
    itype, _, market = scope.partition("@")
    market = market.partition("@")[0]
    try:
        return itype, Market(market)
    except ValueError:
        return scope, Market.SPOT


def scope_bulk(scope: str) -> str:
    """The bulk operation's requestId a gang VM's scope names ("" for a single VM)."""
    marker = scope.split("@")[2] if scope.count("@") >= 2 else ""
    return marker.removeprefix("bulk-")


def _last(url: str) -> str:
    return url.rsplit("/", 1)[-1] if url else ""


def _time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def _done(op: Any) -> bool:
    s = op.status
    return getattr(s, "name", str(s)) == "DONE"


def _has_error(op: Any) -> bool:
    return bool(op.error and list(op.error.errors or []))


class Instances:
    def __init__(self, api: Api, owner: str, caps: Capabilities) -> None:
        self._api = api
        self._owner = owner
        self._caps = caps
        self._placement = Placement(api, owner, caps)

    @property
    def _s(self):  # type: ignore[no-untyped-def]
        return self._api.settings

    def _client(self) -> Any:
        return self._api.compute("InstancesClient")

    # ----------------------------------------------------------------- launch

    def launch(self, request: LaunchRequest) -> list[Instance]:
        o = request.offering
        if o.cloud != CLOUD:
            raise FatalError(f"gcp launch: offering belongs to cloud {o.cloud!r}")
        if o.region not in self._s.regions:
            raise FatalError(f"gcp launch: region {o.region} is not configured")
        if request.count > 1:
            return self._launch_gang(request)
        if request.count != 1:
            raise LaunchRejected(f"gcp launch: count {request.count} is not in 1..{MAX_GANG}")
        name = instance_name(request.token)
        env = {str(k): str(v) for k, v in request.env.items()}
        env["SPOTWISE_CLOUD"] = CLOUD
        if o.market is Market.SPOT:  # the trainer counts the whole window from the notice
            window = self._s.preemption_notice + ttl.SHUTDOWN_WINDOW
            env["SPOTWISE_NOTICE_SECONDS"] = f"{window.total_seconds():g}"
        if request.gang_node is not None:  # one node of a gang, replacing a lost one
            env["SPOTWISE_NODE_RANK"] = str(request.gang_node)
            if request.gang_node == 0:  # it hosts the rendezvous: its own name
                env["SPOTWISE_RDZV_ENDPOINT"] = f"{name}:{RDZV_PORT}"
        # LaunchRejected before any call.
        script = build_startup_script(request.command, env, gpus=o.gpu_count)
        ref = ResourceRef(name, o.region, o.zone, make_scope(o.instance_type, o.market))
        if self._get(o.zone, name) is not None or self._ops(o.zone, [name]).get(name):
            # A retry after a lost reply or a restart (the VM, or its insert/end on record):
            # adopt what is there rather than launch twice, even past the requestId window.
            return self.describe([ref])
        labels = self._labels(request)
        policy = self._policy(request, labels)
        resource = self._resource(request, name, script, labels)
        if policy:
            resource.resource_policies = [policy]
        client = self._client()
        what = f"instances.insert {o.instance_type} ({o.market.value}) in {o.zone}"
        try:
            op = client.insert_unary(
                request={
                    "project": self._s.project, "zone": o.zone,
                    "instance_resource": resource, "request_id": request_id(request.token),
                },
                timeout=self._api.timeout,
            )  # fmt: skip
        except gexc.Conflict:  # the name exists: ours (deterministic), adopt it
            if self._get(o.zone, name) is not None:
                return self.describe([ref])
            raise translate(
                gexc.Conflict("instance name exists but is not visible"), what=what
            ) from None
        except Exception as exc:
            raise translate(
                exc, what=what, pool=o.pool, secrets=self._api.secrets(), request=True
            ) from None
        if _done(op) and _has_error(op):
            raise operation_failure(op, o.pool, self._api.secrets()).to_error()
        return [
            Instance(
                id=name, cloud=CLOUD, region=o.region, zone=o.zone,
                instance_type=o.instance_type, market=o.market, state=InstanceState.PENDING,
                tags=labels, launched_at=self._api.now(),
                scope=make_scope(o.instance_type, o.market), node=request.node_of(0),
            )
        ]  # fmt: skip

    def _launch_gang(self, request: LaunchRequest) -> list[Instance]:
        """One bulkInsert with count = minCount = N, not waited on (see gangs.py): the N
        VMs come back PENDING; a stockout or quota inside the operation is reported by
        describe on every node, with how many the zone held."""
        o = request.offering
        n = request.count
        if n > MAX_GANG:
            raise LaunchRejected(f"gcp launch: count {n} is not in 1..{MAX_GANG}")
        base = instance_name(request.token)
        names = [node_name(base, i) for i in range(n)]
        rid = request_id(request.token, "bulkInsert")
        scope = make_scope(o.instance_type, o.market, bulk_request_id(rid))
        refs = [ResourceRef(name, o.region, o.zone, scope) for name in names]
        env = {str(k): str(v) for k, v in request.env.items()}
        env["SPOTWISE_CLOUD"] = CLOUD
        env["SPOTWISE_NNODES"] = str(n)
        env.setdefault("SPOTWISE_RDZV_ENDPOINT", f"{names[0]}:{RDZV_PORT}")
        script = build_startup_script(request.command, env, gpus=o.gpu_count, gang=True)
        if self._list_zone(o.zone, names) or self._bulk_ops(o.zone, [rid]):
            return self.describe(refs)  # a retry or a restart: adopt, never launch twice
        labels = self._labels(request)
        policy = self._policy(request, labels)
        props = instance_properties(self._resource(request, names[0], script, labels), policy)
        from google.cloud import compute_v1

        body = compute_v1.BulkInsertInstanceResource(
            count=n,
            min_count=n,  # all or nothing: GCE deletes what it made when it cannot reach N
            per_instance_properties={
                name: compute_v1.BulkInsertInstanceResourcePerInstanceProperties(name=name)
                for name in names
            },
            instance_properties=props,
        )
        what = f"instances.bulkInsert {n} x {o.instance_type} ({o.market.value}) in {o.zone}"
        try:
            op = self._client().bulk_insert_unary(
                request={
                    "project": self._s.project, "zone": o.zone,
                    "bulk_insert_instance_resource_resource": body, "request_id": rid,
                },
                timeout=self._api.timeout,
            )  # fmt: skip
        except gexc.Conflict:  # a name of the family exists: ours, adopt the gang
            return self.describe(refs)
        except Exception as exc:
            raise translate(
                exc, what=what, pool=o.pool, secrets=self._api.secrets(), request=True
            ) from None
        if _done(op) and _has_error(op):
            raise bulk_failure(op, o.pool, n, self._api.secrets()).to_error()
        now = self._api.now()
        return [
            Instance(
                id=name, cloud=CLOUD, region=o.region, zone=o.zone,
                instance_type=o.instance_type, market=o.market, state=InstanceState.PENDING,
                tags=dict(labels), launched_at=now, scope=scope, node=i,
            )
            for i, name in enumerate(names)
        ]  # fmt: skip

    def _bulk_ops(self, zone: str, rids: Iterable[str]) -> dict[str, Any]:
        """The bulkInsert operations we sent with these requestIds, by requestId (GCE keeps
        it as the operation's clientOperationId)."""
        want = sorted(set(rids))
        if not want:
            return {}
        client = self._api.compute("ZoneOperationsClient")
        flt = f'clientOperationId eq "({"|".join(want)})"'
        raws = self._api.call(
            f"zoneOperations.list in {zone}",
            lambda: list(
                client.list(
                    request={"project": self._s.project, "zone": zone, "filter": flt},
                    timeout=self._api.timeout,
                )
            ),
        )
        return {
            op.client_operation_id: op
            for op in raws
            if op.client_operation_id in want and op.operation_type == "bulkInsert"
        }

    def _policy(self, request: LaunchRequest, labels: dict[str, str]) -> str:
        """The gang's compact placement policy (created if need be), where its machine
        series takes one; "" otherwise."""
        o = request.offering
        machine, _, _ = parse_shape(o.instance_type)
        if not request.placement_group or not takes_compact_placement(machine):
            return ""
        return self._placement.ensure(request, o.region, labels)

    def _labels(self, request: LaunchRequest) -> dict[str, str]:
        raw = {str(k): str(v) for k, v in request.tags.items()}
        raw.setdefault(TAG_OWNER, self._owner)
        if request.count == 1:
            raw[TAG_NODE] = str(request.node_of(0))
        else:  # one set of labels for all N: each VM gets its node by setLabels (gangs.py)
            raw.pop(TAG_NODE, None)
        out = {}
        for k, v in raw.items():
            key = self._caps.label(k)
            if not key or not key[0].isalpha():
                key = f"k{key}"[: self._caps.label_max_length]
            out[key] = self._caps.label(v)
        return out

    def _resource(
        self, request: LaunchRequest, name: str, script: str, labels: dict[str, str]
    ) -> Any:
        from google.cloud import compute_v1

        s, o = self._s, request.offering
        machine, accel, count = parse_shape(o.instance_type)
        sched = compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=False)
        if o.market is Market.SPOT:
            sched.provisioning_model = "SPOT"
            sched.instance_termination_action = "DELETE"
            notice = int(s.preemption_notice.total_seconds())
            if notice > 0:
                sched.preemption_notice_duration = compute_v1.Duration(seconds=notice)
        elif s.flex_start_max_run is not None:  # DWS flex-start
            sched.provisioning_model = "FLEX_START"
            sched.instance_termination_action = "DELETE"
            sched.max_run_duration = compute_v1.Duration(
                seconds=int(s.flex_start_max_run.total_seconds())
            )
        nic = compute_v1.NetworkInterface(network=s.network)
        sub = s.subnetwork_for(o.region)
        if sub:
            nic.subnetwork = sub
        if s.external_ip:
            nic.access_configs = [
                compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")
            ]
        disk_type = boot_disk_type(machine, s.disk_type)  # SettingRefused: the config's
        disk = compute_v1.AttachedDisk(
            boot=True,
            auto_delete=True,  # the boot disk goes with the VM: nothing left to collect
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=s.image,
                disk_size_gb=s.disk_size_gb,
                disk_type=f"zones/{o.zone}/diskTypes/{disk_type}",
                labels=labels,
            ),
        )
        items = [compute_v1.Items(key="startup-script", value=script)]
        if o.gpu_count > 0:
            # Deep Learning VM images install the NVIDIA driver only when asked to.
            items.append(compute_v1.Items(key="install-nvidia-driver", value="True"))
        inst = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{o.zone}/machineTypes/{machine}",
            scheduling=sched,
            disks=[disk],
            network_interfaces=[nic],
            labels=labels,
            metadata=compute_v1.Metadata(items=items),
        )
        if sched.provisioning_model == "FLEX_START":
            inst.reservation_affinity = compute_v1.ReservationAffinity(
                consume_reservation_type="NO_RESERVATION"
            )
        if accel:
            inst.guest_accelerators = [
                compute_v1.AcceleratorConfig(
                    accelerator_count=count,
                    accelerator_type=f"zones/{o.zone}/acceleratorTypes/{accel}",
                )
            ]
        if s.service_account or s.scopes:
            inst.service_accounts = [
                compute_v1.ServiceAccount(email=s.service_account or "default", scopes=s.scopes)
            ]
        return inst

    # ----------------------------------------------------------------- observe

    def _get(self, zone: str, name: str) -> Any | None:
        client = self._client()
        try:
            return client.get(
                project=self._s.project, zone=zone, instance=name, timeout=self._api.timeout
            )
        except gexc.NotFound:
            return None
        except Exception as exc:
            raise translate(
                exc, what=f"instances.get in {zone}", secrets=self._api.secrets()
            ) from None

    def _list_zone(self, zone: str, names: Sequence[str]) -> dict[str, Any]:
        client = self._client()
        flt = 'name eq "(' + "|".join(re.escape(n) for n in names) + ')"'
        raws = self._api.call(
            f"instances.list in {zone}",
            lambda: list(
                client.list(
                    request={"project": self._s.project, "zone": zone, "filter": flt},
                    timeout=self._api.timeout,
                )
            ),
        )
        return {r.name: r for r in raws if r.name in names}

    def _ops(self, zone: str, names: Iterable[str]) -> dict[str, list[Any]]:
        """The insert and ending operations of these instance names, oldest first. The list
        is filtered on the instances' targetLink (a regular expression, GCE's `eq` filter
        form), so a zone with thousands of other operations is not paged through."""
        want = sorted(set(names))
        client = self._api.compute("ZoneOperationsClient")
        raws: list[Any] = []
        for i in range(0, len(want), OPS_NAMES_PER_CALL):
            chunk = want[i : i + OPS_NAMES_PER_CALL]
            # Names and project ids are [a-z0-9-]: nothing in them is a regex operator.
            flt = (
                f'targetLink eq ".*/projects/{self._s.project}/zones/{zone}/'
                f'instances/({"|".join(chunk)})"'
            )
            raws += self._api.call(
                f"zoneOperations.list in {zone}",
                lambda flt=flt: list(  # type: ignore[misc]
                    client.list(
                        request={"project": self._s.project, "zone": zone, "filter": flt},
                        timeout=self._api.timeout,
                    )
                ),
            )
        out: dict[str, list[Any]] = {}
        for op in raws:
            n = _last(op.target_link)
            kind = op.operation_type
            if (
                n in want
                and "/instances/" in op.target_link
                and (kind == "insert" or kind in _ENDING_OPS)
            ):
                out.setdefault(n, []).append(op)
        for ops in out.values():
            ops.sort(key=lambda op: op.insert_time or "")
        return out

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        if not refs:
            return []
        now = self._api.now()
        zoned = [r for r in refs if r.zone]
        by_zone: dict[str, list[str]] = {}
        scopes = {(r.zone, r.id): r.scope for r in zoned}
        for r in zoned:
            by_zone.setdefault(r.zone, [])
            if r.id not in by_zone[r.zone]:
                by_zone[r.zone].append(r.id)
        found: dict[tuple[str, str], Instance] = {}
        for zone, names in by_zone.items():
            raws = self._list_zone(zone, names)
            label_nodes(self._api, raws.values(), self._caps.label(self._owner))
            views = {n: self._view(raw, now) for n, raw in raws.items()}
            undecided = [
                n for n in names if n not in views or views[n].state is InstanceState.ENDED
            ]
            ops = self._ops(zone, undecided) if undecided else {}
            bulk = self._bulk_ops(
                zone, [b for n in undecided if (b := scope_bulk(scopes.get((zone, n), "")))]
            )
            for n in names:
                inst = views.get(n)
                scope = scopes.get((zone, n), "")
                op = bulk.get(scope_bulk(scope))
                if inst is None and not ops.get(n) and op is not None:
                    inst = self._bulk_ghost(op, zone, n, scope, now)
                else:
                    inst = self._merge_operations(inst, ops.get(n, []), zone, n, now, scope)
                if inst is not None:
                    found[(zone, n)] = inst
        for r in refs:  # no zone: search every configured region by name
            if not r.zone:
                for inst in self._by_name(r.id):
                    found.setdefault((r.zone, r.id), inst)
        return [found.get((r.zone, r.id)) or not_found(r, CLOUD) for r in refs]

    def _merge_operations(
        self,
        inst: Instance | None,
        ops: list[Any],
        zone: str,
        name: str,
        now: datetime,
        scope: str = "",
    ) -> Instance | None:
        """Combine what the instance list shows with the operations on that name."""
        ending = [op for op in ops if op.operation_type in _ENDING_OPS]
        inserts = [op for op in ops if op.operation_type == "insert"]
        if inst is not None and inst.state is not InstanceState.ENDED:
            return inst
        if ending:
            # What ended it first wins over the cleanup after it (a preemption or the guest's
            # own shutdown, then our delete); a preemption anywhere wins outright.
            op = next(
                (o for o in ending if _ENDING_OPS[o.operation_type] is EndReason.INTERRUPTED),
                ending[0],
            )
            inst = inst or self._ghost(zone, name, inserts, scope)
            inst.state = InstanceState.ENDED
            inst.end_reason = _ENDING_OPS[op.operation_type]
            inst.ended_at = _time(op.end_time) or _time(op.insert_time) or now
            return inst
        if inst is not None:  # stopped without any operation on record: the guest shut down
            inst.end_reason = EndReason.EXITED
            inst.ended_at = inst.ended_at or now
            return inst
        if not inserts:
            return None
        op = inserts[-1]
        ghost = self._ghost(zone, name, inserts, scope)
        if not _done(op):
            ghost.state = InstanceState.PENDING
            return ghost
        if _has_error(op):
            ghost.failure = operation_failure(op, ghost.pool, self._api.secrets())
            ghost.state = InstanceState.ENDED
            ghost.end_reason = EndReason.LAUNCH_FAILED
            ghost.ended_at = _time(op.end_time) or now
            return ghost
        # Inserted fine, gone now, and no operation says why (they expire): unknown end.
        ghost.state = InstanceState.ENDED
        ghost.end_reason = EndReason.UNKNOWN
        ghost.ended_at = now
        return ghost

    def _bulk_ghost(self, op: Any, zone: str, name: str, scope: str, now: datetime) -> Instance:
        """A gang VM known only from its bulk operation: pending while it runs, a failed
        launch (with how many the zone held) when it ended in an error."""
        ghost = self._ghost(zone, name, [op], scope)
        ghost.node = node_of_name(name) or 0
        if not _done(op):
            ghost.state = InstanceState.PENDING
            return ghost
        ghost.state = InstanceState.ENDED
        ghost.ended_at = _time(op.end_time) or now
        if _has_error(op):
            meta = op.instances_bulk_insert_operation_metadata
            statuses = list(dict(meta.per_location_status or {}).values()) if meta else []
            target = max((int(st.target_vm_count or 0) for st in statuses), default=0)
            ghost.failure = bulk_failure(op, ghost.pool, target, self._api.secrets())
            ghost.end_reason = EndReason.LAUNCH_FAILED
        else:  # created, gone since, and no operation of its own says why
            ghost.end_reason = EndReason.UNKNOWN
        return ghost

    def _ghost(self, zone: str, name: str, inserts: list[Any], scope: str) -> Instance:
        """An instance known only from its operations (never created, or already deleted)."""
        op = inserts[-1] if inserts else None
        itype, market = parse_scope(scope)
        return Instance(
            id=name, cloud=CLOUD, region=region_of_zone(zone), zone=zone, instance_type=itype,
            market=market, state=InstanceState.ENDED, scope=scope,
            launched_at=_time(op.insert_time) if op else None,
        )  # fmt: skip

    def _view(self, raw: Any, now: datetime | None = None) -> Instance:
        zone = _last(raw.zone)
        machine = _last(raw.machine_type)
        accs = list(raw.guest_accelerators or [])
        itype = (
            shape_name(machine, _last(accs[0].accelerator_type), int(accs[0].accelerator_count))
            if accs
            else machine
        )
        spot = raw.scheduling and raw.scheduling.provisioning_model == "SPOT"
        state = _STATES.get(str(raw.status), InstanceState.PENDING)
        labels = dict(raw.labels or {})
        inst = Instance(
            id=raw.name, cloud=CLOUD, region=region_of_zone(zone), zone=zone,
            instance_type=itype, market=Market.SPOT if spot else Market.ON_DEMAND, state=state,
            tags=labels, launched_at=_time(raw.creation_timestamp),
            node=int(labels[TAG_NODE]) if labels.get(TAG_NODE, "").isdigit()
            else node_of_name(str(raw.name)) or 0,
        )  # fmt: skip
        inst.scope = make_scope(inst.instance_type, inst.market)
        if state is InstanceState.ENDED:
            inst.ended_at = _time(raw.last_stop_timestamp) or now
        return inst

    def _aggregated(self, flt: str) -> list[Instance]:
        client = self._client()
        regions = set(self._s.regions)

        def fetch() -> list[Any]:
            out = []
            for scope, scoped in client.aggregated_list(
                request={"project": self._s.project, "filter": flt, "max_results": 500},
                timeout=self._api.timeout,
            ):
                if region_of_zone(_last(scope)) in regions:
                    out.extend(scoped.instances)
            return out

        raws = self._api.call("instances.aggregatedList", fetch)
        now = self._api.now()
        return [self._view(r, now) for r in raws]

    def _by_name(self, name: str, region: str = "", family: bool = False) -> list[Instance]:
        """The VM named `name` (with `family`, also its gang's nodes `name-n<i>`)."""
        pattern = f"{name}(-n[0-9]+)?" if family else name
        found = [
            i
            for i in self._aggregated(f'name eq "{pattern}"')
            if i.id == name or (family and node_of_name(i.id) is not None
                                and i.id.rsplit("-n", 1)[0] == name)
        ]  # fmt: skip
        if region:
            found = [i for i in found if i.region == region]
        for i in found:
            if i.state is InstanceState.ENDED:
                ops = self._ops(i.zone, [i.id])
                self._merge_operations(i, ops.get(i.id, []), i.zone, i.id, self._api.now())
        return found

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        found = self._by_name(instance_name(token), region, family=True)
        return sorted(found, key=lambda i: i.node)

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        value = self._caps.label(owner)
        out = []
        for i in self._aggregated(f'labels.{TAG_OWNER} = "{value}"'):
            if i.tags.get(TAG_OWNER) != value:
                continue
            # Every VM the list shows still exists: a stopped one (the job powered off) keeps
            # its boot disk, billed, so it counts as live for leak collection, which deletes
            # it once no live attempt owns it (the scheduler never terminates ended VMs).
            out.append(TaggedResource(i.ref, dict(i.tags), True, i.launched_at))
        return out + self._placement.list_tagged(value)

    # ----------------------------------------------------------------- terminate

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        """Delete instances (their boot disks go with them); gone ones are not an error."""
        client = self._client()
        for ref in refs:
            if ref.kind is ResourceKind.PLACEMENT_GROUP:
                self._placement.delete(ref)
                continue
            if ref.kind is not ResourceKind.INSTANCE:
                continue
            zones = [ref.zone] if ref.zone else [i.zone for i in self._by_name(ref.id)]
            for zone in zones:
                try:
                    client.delete_unary(
                        request={
                            "project": self._s.project, "zone": zone, "instance": ref.id,
                            "request_id": request_id(ref.id, "delete"),
                        },
                        timeout=self._api.timeout,
                    )  # fmt: skip
                except gexc.NotFound:
                    continue
                except gexc.BadRequest as exc:
                    if NOT_READY in api_codes(exc):
                        # Already going away (stopping after a preemption, an earlier
                        # delete in flight): the stop is re-sent after stop_grace.
                        continue
                    raise translate(
                        exc, what=f"instances.delete in {zone}", secrets=self._api.secrets()
                    ) from None
                except Exception as exc:
                    raise translate(
                        exc, what=f"instances.delete in {zone}", secrets=self._api.secrets()
                    ) from None


__all__ = ["Instances", "instance_name", "pool_key", "request_id"]
