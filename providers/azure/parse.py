"""Read ARM's VM, NIC, disk and IP documents (wire form) into the seam's types, including
why a VM ended. Pure functions: no client, no state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from providers.azure.errors import failure_kind
from providers.azure.offerings import CLOUD, zone_name
from providers.base import (
    TAG_NODE,
    EndReason,
    FailureKind,
    Instance,
    InstanceState,
    LaunchFailure,
    Market,
    ResourceKind,
    ResourceRef,
    TaggedResource,
)

EXIT_CODE_TAG = "spotwise-exit-code"


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def statuses(raw: dict[str, Any]) -> list[dict[str, Any]]:
    props = raw.get("properties") or {}
    view = props.get("instanceView") or raw.get("instanceView") or {}
    return list(view.get("statuses") or [])


def power_state(raw: dict[str, Any]) -> str:
    for s in statuses(raw):
        code = str(s.get("code", ""))
        if code.startswith("PowerState/"):
            return code.split("/", 1)[1].lower()
    return ""


def provisioning_failure(raw: dict[str, Any]) -> tuple[str, str]:
    """(error code, message) of a failed provisioning, from the instance view."""
    for s in statuses(raw):
        code = str(s.get("code", ""))
        if code.lower().startswith("provisioningstate/failed"):
            parts = code.split("/", 2)
            return (parts[2] if len(parts) > 2 else "ProvisioningFailed"), str(
                s.get("message") or s.get("displayStatus") or ""
            )
    return "ProvisioningFailed", ""


def vm_zone(raw: dict[str, Any]) -> str:
    zones = raw.get("zones") or []
    return zone_name(str(raw.get("location", "")), str(zones[0]) if zones else "")


def to_instance(
    raw: dict[str, Any],
    now: datetime,
    *,
    scope: str,
    deleted_by_us: bool = False,
    launched_at: datetime | None = None,
) -> Instance:
    props = raw.get("properties") or {}
    tags = {str(k): str(v) for k, v in (raw.get("tags") or {}).items()}
    location = str(raw.get("location", ""))
    market = Market.SPOT if props.get("priority") in ("Spot", "Low") else Market.ON_DEMAND
    itype = str((props.get("hardwareProfile") or {}).get("vmSize", ""))
    inst = Instance(
        id=str(raw.get("name", "")),
        cloud=CLOUD,
        region=location,
        zone=vm_zone(raw),
        instance_type=itype,
        market=market,
        state=InstanceState.PENDING,
        tags=tags,
        launched_at=parse_time(props.get("timeCreated")) or launched_at,
        scope=scope,
        node=int(tags[TAG_NODE]) if tags.get(TAG_NODE, "").isdigit() else 0,
    )
    prov = str(props.get("provisioningState", "")).lower()
    power = power_state(raw)
    if prov == "deleting":
        reason = EndReason.TERMINATED if deleted_by_us else gone_reason(market)
        return ended(inst, reason, now)
    if prov == "failed" and power not in ("running", "starting"):
        code, message = provisioning_failure(raw)
        kind = failure_kind(code, message) or FailureKind.FATAL
        inst.failure = LaunchFailure(
            kind, f"azure: VM {inst.id}: {code}: {message}".rstrip(": "), inst.pool
        )
        return ended(inst, EndReason.LAUNCH_FAILED, now)
    if power in ("deallocated", "deallocating"):
        # Spot eviction under the Deallocate policy (ours is Delete) or a user's deallocate.
        reason = EndReason.TERMINATED if deleted_by_us else gone_reason(market)
        return ended(inst, reason, now)
    if power in ("stopped", "stopping"):
        ended(inst, EndReason.TERMINATED if deleted_by_us else EndReason.EXITED, now)
        code = tags.get(EXIT_CODE_TAG, "")
        if code.lstrip("-").isdigit():
            inst.exit_code = int(code)
        return inst
    if power == "running" and prov in ("succeeded", "updating", "failed", ""):
        inst.state = InstanceState.RUNNING
    return inst


def gone_reason(market: Market | None) -> EndReason:
    """A VM of ours that went away without our delete: under the Delete eviction policy a
    Spot eviction is exactly that; anything else is not ours to explain."""
    return EndReason.UNKNOWN if market is Market.ON_DEMAND else EndReason.INTERRUPTED


def ended(inst: Instance, reason: EndReason, now: datetime) -> Instance:
    inst.state = InstanceState.ENDED
    inst.end_reason = reason
    inst.ended_at = now
    return inst


def vanished(
    ref: ResourceRef, now: datetime, *, deleted_by_us: bool, market: Market | None
) -> Instance:
    """What describe reports for a VM we launched that ARM no longer shows."""
    inst = Instance(
        id=ref.id,
        cloud=CLOUD,
        region=ref.region,
        zone=ref.zone,
        instance_type="",
        market=market or Market.SPOT,
        state=InstanceState.ENDED,
        launched_at=ref.launched_at,
        scope=ref.scope,
    )
    return ended(inst, EndReason.TERMINATED if deleted_by_us else gone_reason(market), now)


def resource(raw: dict[str, Any], kind: ResourceKind, scope: str) -> TaggedResource:
    """A NIC, disk or public IP carrying our owner tag (listed only when left over)."""
    tags = {str(k): str(v) for k, v in (raw.get("tags") or {}).items()}
    props = raw.get("properties") or {}
    location = str(raw.get("location", ""))
    zones = raw.get("zones") or []
    ref = ResourceRef(
        str(raw.get("name", "")),
        location,
        zone_name(location, str(zones[0]) if zones else ""),
        scope,
        kind=kind,
    )
    return TaggedResource(ref, tags, live=True, created_at=parse_time(props.get("timeCreated")))
