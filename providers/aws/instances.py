"""Read EC2's instance descriptions into the provider's Instance, including why one ended."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from providers.aws.userdata import EXIT_CODE_TAG
from providers.base import EndReason, Instance, InstanceState, Market

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

# StateReason.Code -> why the instance ended.
_REASONS = {
    "Server.SpotInstanceTermination": EndReason.INTERRUPTED,
    "Server.SpotInstanceShutdown": EndReason.INTERRUPTED,
    "Server.InsufficientInstanceCapacity": EndReason.INTERRUPTED,
    "Client.UserInitiatedShutdown": EndReason.TERMINATED,
    "Client.UserInitiatedHibernate": EndReason.TERMINATED,
    "Client.InstanceInitiatedShutdown": EndReason.EXITED,
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


def to_instance(raw: dict[str, Any], now: datetime) -> Instance:
    tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", []) or []}
    state = _STATES.get(raw.get("State", {}).get("Name", ""), InstanceState.ENDED)
    zone = raw.get("Placement", {}).get("AvailabilityZone", "")
    market = Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
    launched = raw.get("LaunchTime")
    if isinstance(launched, datetime):
        launched = launched.replace(tzinfo=UTC) if launched.tzinfo is None else launched
        launched = launched.astimezone(UTC)
    inst = Instance(
        id=raw["InstanceId"],
        cloud=CLOUD,
        region=region_of_zone(zone) if zone else "",
        zone=zone,
        instance_type=raw.get("InstanceType", ""),
        market=market,
        state=state,
        tags=tags,
        launched_at=launched if isinstance(launched, datetime) else None,
    )
    if state is InstanceState.ENDED:
        inst.end_reason = end_reason(raw.get("StateReason", {}).get("Code"))
        inst.ended_at = transition_time(raw.get("StateTransitionReason")) or now
        code = tags.get(EXIT_CODE_TAG, "")
        if code.lstrip("-").isdigit():
            inst.exit_code = int(code)
    return inst
