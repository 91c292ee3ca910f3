"""Read EC2's descriptions (instances, volumes) into the seam's types, including why an
instance ended. Pure functions: no client, no state."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from providers.aws.userdata import EXIT_CODE_TAG
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

CLOUD = "aws"

_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.ENDED,
    "terminated": InstanceState.ENDED,
    # We launch with terminate-on-interruption and terminate-on-shutdown, so a stopped box is
    # finished for us; terminate() cleans it up.
    "stopping": InstanceState.ENDED,
    "stopped": InstanceState.ENDED,
}

# StateReason.Code -> why the instance ended. Every code botocore's EC2 model documents
# (service-2.json, StateReason.Message) is here; tests/providers/aws/test_aws_state_reasons.py
# reads them from the installed model, so a new code fails a test until it is placed.
_REASONS = {
    # The cloud took it back: an interruption to recover from.
    "Server.SpotInstanceTermination": EndReason.INTERRUPTED,
    "Server.SpotInstanceShutdown": EndReason.INTERRUPTED,
    "Server.ScheduledStop": EndReason.INTERRUPTED,  # a scheduled retirement
    # Ours or a person's.
    "Client.UserInitiatedShutdown": EndReason.TERMINATED,
    "Client.UserInitiatedHibernate": EndReason.TERMINATED,
    "Client.InstanceTerminated": EndReason.TERMINATED,  # terminated during AMI creation
    "Client.InstanceInitiatedShutdown": EndReason.EXITED,  # the boot script powered off
    # It never ran: a launch that did not get its capacity or its disks.
    "Server.InsufficientInstanceCapacity": EndReason.LAUNCH_FAILED,
    "Server.InternalError": EndReason.LAUNCH_FAILED,
    "Client.InternalError": EndReason.LAUNCH_FAILED,
    "Client.InvalidSnapshot.NotFound": EndReason.LAUNCH_FAILED,
    "Client.VolumeLimitExceeded": EndReason.LAUNCH_FAILED,
}
# What each launch-time code says about the pool: capacity and quota mark it; an internal
# error marks nothing (the next launch may well work); a client error is the account's
# setup (the AMI's snapshot, an EBS KMS key: "Client.InternalError: A client error caused
# the instance to terminate during launch"), the same in every pool.
_LAUNCH_FAILURES = {
    "Server.InsufficientInstanceCapacity": FailureKind.CAPACITY,
    "Client.VolumeLimitExceeded": FailureKind.QUOTA,
    "Client.InternalError": FailureKind.SETUP,
    "Client.InvalidSnapshot.NotFound": FailureKind.SETUP,
}

# "User initiated (2026-11-29 15:02:00 GMT)"; moto writes UTC instead of GMT.
_WHEN = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def end_reason(code: str | None) -> EndReason:
    return _REASONS.get(code or "", EndReason.UNKNOWN)


def transition_time(text: str | None) -> datetime | None:
    m = _WHEN.search(text or "")
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def region_of_zone(zone: str) -> str:
    """us-east-1a -> us-east-1 (also for local/wavelength zones: us-east-1-bos-1a)."""
    m = re.match(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)", zone)
    return m.group(1) if m else zone[:-1]


def _utc(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    return value.astimezone(UTC)


def node_index(raw: dict[str, Any], tags: dict[str, str]) -> int:
    """The node of a gang: our tag, else EC2's AmiLaunchIndex (the same number, and present
    even when the tag could not be written after launch)."""
    tagged = tags.get(TAG_NODE, "")
    if tagged.isdigit():
        return int(tagged)
    return int(raw.get("AmiLaunchIndex") or 0)


def to_instance(raw: dict[str, Any], now: datetime, region: str = "") -> Instance:
    tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", []) or []}
    state = _STATES.get(raw.get("State", {}).get("Name", ""), InstanceState.ENDED)
    zone = raw.get("Placement", {}).get("AvailabilityZone", "")
    market = Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
    inst = Instance(
        id=raw["InstanceId"],
        cloud=CLOUD,
        region=region or (region_of_zone(zone) if zone else ""),
        zone=zone,
        instance_type=raw.get("InstanceType", ""),
        market=market,
        state=state,
        tags=tags,
        launched_at=_utc(raw.get("LaunchTime")),
        node=node_index(raw, tags),
    )
    if state is InstanceState.ENDED:
        reason = raw.get("StateReason") or {}
        inst.end_reason = end_reason(reason.get("Code"))
        inst.ended_at = transition_time(raw.get("StateTransitionReason")) or now
        kind = _LAUNCH_FAILURES.get(str(reason.get("Code", "")))
        if kind is not None:
            inst.failure = LaunchFailure(
                kind, f"aws: {reason.get('Code')}: {reason.get('Message', '')}", inst.pool
            )
        code = tags.get(EXIT_CODE_TAG, "")
        if code.lstrip("-").isdigit():
            inst.exit_code = int(code)
    return inst


def volume_resource(raw: dict[str, Any], region: str) -> TaggedResource:
    """A volume carrying our owner tag (listed only when left unattached)."""
    tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", []) or []}
    zone = raw.get("AvailabilityZone", "")
    ref = ResourceRef(raw["VolumeId"], region, zone, kind=ResourceKind.DISK)
    return TaggedResource(ref, tags, live=True, created_at=_utc(raw.get("CreateTime")))
