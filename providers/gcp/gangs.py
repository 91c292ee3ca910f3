"""Gangs on Compute Engine: one instances.bulkInsert for N VMs, all or nothing, in a compact
placement policy where the machine series takes one.

- **bulkInsert** with `count = minCount = N` and `perInstanceProperties` naming every node
  (`<name>-n<i>`, deterministic from the token): GCE creates all N or none (it deletes what
  it created when it cannot reach minCount), and a retry with the same requestId is the same
  request. The operation is not waited on; describe reads it by its `clientOperationId`
  (the requestId we sent): its error (capacity, quota) and `perLocationStatus`
  (`createdVmCount`, `deletedVmCount`: how many the zone held before it gave up).
- **compact placement**: a regional resource policy (`groupPlacementPolicy.collocation =
  COLLOCATED`), one per attempt, created before the VMs and attached through
  `resourcePolicies`; a node that replaces a lost one joins the same policy. Resource
  policies carry no labels, so ours say owner, job and attempt in their description; leak
  collection deletes one once its attempt is over (GCE refuses while a VM still uses it:
  the next sweep tries again).
- **one startup-script** for all N (instanceProperties are one for all): each node learns its
  rank from its own name on the metadata server; node 0's name (its hostname on the VPC's
  internal DNS) is the rendezvous endpoint.
- **labels per node**: `spotwise-node` is set on each VM by setLabels once it exists
  (describe, best effort: the name says the rank anyway).

The request and operation shapes are google-cloud-compute's models (BulkInsertInstanceResource,
InstanceProperties, BulkInsertOperationStatus, ResourcePolicyGroupPlacementPolicy) and the
Compute Engine REST reference ("instances.bulkInsert", "resourcePolicies.insert").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from google.api_core import exceptions as gexc

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_OWNER,
    Capabilities,
    LaunchFailure,
    LaunchRequest,
    ResourceKind,
    ResourceRef,
    TaggedResource,
)
from providers.gcp.api import Api
from providers.gcp.errors import api_codes, operation_failure, translate
from providers.gcp.settings import region_of_zone

# One request launches at most this many (a gang's nodes): GCE's bulkInsert takes up to
# 1,000, and one compact placement policy far fewer on most series; a larger gang is refused
# before any call rather than found wanting by the cloud.
MAX_GANG = 64
# torchrun's default static rendezvous port, on node 0.
RDZV_PORT = 29400
# The startup-script's rank, from the VM's own name (`...-n<rank>`), when no rank is given.
RANK_FROM_NAME = """if [ -z "${SPOTWISE_NODE_RANK:-}" ]; then
  name=$(curl -sf --max-time 5 -H 'Metadata-Flavor: Google' \\
    http://metadata.google.internal/computeMetadata/v1/instance/name || true)
  export SPOTWISE_NODE_RANK="${name##*-n}"
fi
"""
_NODE_SUFFIX = re.compile(r"-n(\d+)$")
# GCE answers DELETE of a resource policy a VM still uses with 400 resourceInUseByAnotherResource.
IN_USE = "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"
POLICY_PREFIX = "sw-pp-"


def node_name(base: str, node: int) -> str:
    """Node `node` of the gang whose VMs are named from `base` (instance_name of the token)."""
    return f"{base}-n{node}"


def node_of_name(name: str) -> int | None:
    m = _NODE_SUFFIX.search(name)
    return int(m.group(1)) if m else None


def policy_name(group: str) -> str:
    """A valid resource policy name ([a-z]([-a-z0-9]{0,61}[a-z0-9])?) for a placement group."""
    slug = re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(group.encode()).hexdigest()[:12]
    return f"{POLICY_PREFIX}{slug}-{digest}" if slug else f"{POLICY_PREFIX}{digest}"


def policy_path(project: str, region: str, name: str) -> str:
    return f"projects/{project}/regions/{region}/resourcePolicies/{name}"


def describe_tags(tags: dict[str, str]) -> str:
    """What a resource policy says of itself (it has no labels): our tags, space-separated."""
    keys = (TAG_OWNER, TAG_JOB, TAG_ATTEMPT)
    return "spotwise " + " ".join(f"{k}={tags[k]}" for k in keys if tags.get(k))


def tags_of(description: str) -> dict[str, str]:
    if not description.startswith("spotwise "):
        return {}
    pairs = (w.partition("=") for w in description.split()[1:])
    return {k: v for k, sep, v in pairs if sep}


def bulk_request_id(request_id: str) -> str:
    """The scope marker of a gang VM: the bulk operation's requestId, which describe looks
    the operation up by (clientOperationId)."""
    return f"bulk-{request_id}"


def held_before_failure(op: Any) -> int:
    """How many VMs the zone created before a bulk insert gave up (and rolled them back)."""
    meta = getattr(op, "instances_bulk_insert_operation_metadata", None)
    status = dict(getattr(meta, "per_location_status", None) or {})
    return max((int(getattr(s, "created_vm_count", 0) or 0) for s in status.values()), default=0)


def bulk_failure(op: Any, pool: str, count: int, secrets: Iterable[str]) -> LaunchFailure:
    """A failed bulk insert as the seam says it: the operation's error, and how many of the
    gang the zone held before it."""
    base = operation_failure(op, pool, secrets)
    held = held_before_failure(op)
    text = base.message.replace("gcp insert:", "gcp bulkInsert:", 1)
    if 0 < held < count:
        text = f"{text} (only {held} of {count} before the capacity error)"
    return LaunchFailure(base.kind, text, pool=base.pool, held=held)


class Placement:
    """The compact placement policies of our gangs: create, list (leak collection), delete."""

    def __init__(self, api: Api, owner: str, caps: Capabilities) -> None:
        self._api = api
        self._owner = owner
        self._caps = caps

    def _client(self) -> Any:
        return self._api.compute("ResourcePoliciesClient")

    def ensure(self, request: LaunchRequest, region: str, tags: dict[str, str]) -> str:
        """The attempt's compact policy (created once; an existing one is reused): its path."""
        from google.cloud import compute_v1

        s = self._api.settings
        assert request.placement_group is not None
        name = policy_name(request.placement_group)
        policy = compute_v1.ResourcePolicy(
            name=name,
            description=describe_tags({TAG_OWNER: self._owner, **tags}),
            group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
                collocation="COLLOCATED"
            ),
        )
        try:
            self._client().insert_unary(
                request={
                    "project": s.project, "region": region, "resource_policy_resource": policy,
                    "request_id": _rid(name, "policy"),
                },
                timeout=self._api.timeout,
            )  # fmt: skip
        except gexc.Conflict:
            pass  # ours (named from the attempt): a retry, or a replacement joining it
        except Exception as exc:
            raise translate(
                exc, what=f"resourcePolicies.insert in {region}", secrets=self._api.secrets(),
                request=True,
            ) from None  # fmt: skip
        return policy_path(s.project, region, name)

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        s = self._api.settings
        client = self._client()
        out: list[TaggedResource] = []
        for region in s.regions:
            raws = self._api.call(
                f"resourcePolicies.list in {region}",
                lambda region=region: list(  # type: ignore[misc]
                    client.list(
                        request={
                            "project": s.project, "region": region,
                            "filter": f'name eq "{POLICY_PREFIX}.*"',
                        },
                        timeout=self._api.timeout,
                    )
                ),
            )  # fmt: skip
            for raw in raws:
                tags = tags_of(str(raw.description or ""))
                if tags.get(TAG_OWNER) != owner or not raw.name.startswith(POLICY_PREFIX):
                    continue
                ref = ResourceRef(raw.name, region, kind=ResourceKind.PLACEMENT_GROUP)
                out.append(TaggedResource(ref, tags, True))
        return out

    def delete(self, ref: ResourceRef) -> None:
        """Delete a policy; gone is not an error, nor in use (its VMs are still going away)."""
        s = self._api.settings
        regions = [ref.region] if ref.region else list(s.regions)
        for region in regions:
            try:
                self._client().delete_unary(
                    request={
                        "project": s.project, "region": region, "resource_policy": ref.id,
                        "request_id": _rid(ref.id, "delete-policy"),
                    },
                    timeout=self._api.timeout,
                )  # fmt: skip
            except gexc.NotFound:
                continue
            except gexc.BadRequest as exc:
                if IN_USE in api_codes(exc):
                    continue
                raise translate(
                    exc, what=f"resourcePolicies.delete in {region}", secrets=self._api.secrets()
                ) from None
            except Exception as exc:
                raise translate(
                    exc, what=f"resourcePolicies.delete in {region}", secrets=self._api.secrets()
                ) from None


def label_nodes(api: Api, raws: Iterable[Any], owner_label: str) -> None:
    """Set `spotwise-node` on our gang VMs that lack it (their rank is in their name); best
    effort: a failure is an event, and the name still says the rank."""
    client = api.compute("InstancesClient")
    for raw in raws:
        labels = dict(raw.labels or {})
        node = node_of_name(str(raw.name))
        if node is None or labels.get(TAG_OWNER) != owner_label or TAG_NODE in labels:
            continue
        if str(raw.status) not in ("PROVISIONING", "STAGING", "RUNNING"):
            continue
        labels[TAG_NODE] = str(node)
        zone = str(raw.zone).rsplit("/", 1)[-1]
        try:
            client.set_labels_unary(
                request={
                    "project": api.settings.project, "zone": zone, "instance": raw.name,
                    "instances_set_labels_request_resource": {
                        "labels": labels, "label_fingerprint": raw.label_fingerprint,
                    },
                },
                timeout=api.timeout,
            )  # fmt: skip
        except Exception as exc:
            api.emit(f"gcp: could not label {raw.name} as node {node}: {type(exc).__name__}")


def instance_properties(resource: Any, policy: str) -> Any:
    """The InstanceProperties of a bulkInsert from the Instance one insert would send: the
    same fields, with the short names properties take (machine type, accelerator and disk
    type by name; resource policies by name)."""
    from google.cloud import compute_v1

    def short(path: str) -> str:
        return path.rsplit("/", 1)[-1]

    props = compute_v1.InstanceProperties(
        machine_type=short(resource.machine_type),
        scheduling=resource.scheduling,
        network_interfaces=list(resource.network_interfaces),
        labels=dict(resource.labels),
        metadata=resource.metadata,
        service_accounts=list(resource.service_accounts),
    )
    if "reservation_affinity" in resource:
        props.reservation_affinity = resource.reservation_affinity
    disks = []
    for d in resource.disks:
        d = compute_v1.AttachedDisk(d)
        d.initialize_params.disk_type = short(d.initialize_params.disk_type)
        disks.append(d)
    props.disks = disks
    accels = []
    for acc in resource.guest_accelerators:
        accels.append(
            compute_v1.AcceleratorConfig(
                accelerator_count=acc.accelerator_count,
                accelerator_type=short(acc.accelerator_type),
            )
        )
    if accels:
        props.guest_accelerators = accels
    if policy:
        props.resource_policies = [short(policy)]
    return props


def _rid(name: str, action: str) -> str:
    from providers.gcp.instances import request_id

    return request_id(name, action)


__all__ = [
    "MAX_GANG",
    "RDZV_PORT",
    "Placement",
    "bulk_failure",
    "bulk_request_id",
    "held_before_failure",
    "instance_properties",
    "label_nodes",
    "node_name",
    "node_of_name",
    "policy_name",
    "region_of_zone",
]
