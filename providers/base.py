"""The provider contract: value types every cloud adapter speaks, and the Provider protocol.

Providers speak one cloud's API and make no decisions: they list what can be bought, launch
exactly what they are told (idempotently), report what they see and terminate on request.
Everything here is plain data so the scheduler can persist it and tests can build it by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

# Tag keys put on every instance we launch; leak collection finds instances by them.
TAG_JOB = "spotwise-job"
TAG_ATTEMPT = "spotwise-attempt"
TAG_OWNER = "spotwise-owner"


class Market(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


@dataclass(frozen=True, slots=True)
class Offering:
    """One thing that can be bought now, at a price seen at `seen_at`."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu_model: str  # canonical name, e.g. "A100", "H100", "V100"; "" for CPU-only
    gpu_count: int
    gpu_memory_gb: float  # per GPU
    vcpus: float
    memory_gb: float
    market: Market
    price_per_hour: float
    seen_at: datetime

    @property
    def pool(self) -> str:
        """The capacity pool: interruptions and capacity errors are per pool."""
        return pool_key(self.cloud, self.zone, self.instance_type, self.market)


def pool_key(cloud: str, zone: str, instance_type: str, market: Market | str) -> str:
    return f"{cloud}/{zone}/{instance_type}/{Market(market).value}"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Launch exactly one instance for one attempt.

    `token` is deterministic per attempt: launching twice with the same token must not create
    a second instance (EC2 ClientToken, GCE requestId, a deterministic Azure VM name).
    """

    token: str
    offering: Offering
    command: Sequence[str]
    env: Mapping[str, str]
    tags: Mapping[str, str]


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    ENDED = "ended"


class EndReason(StrEnum):
    """Why an instance is gone; only INTERRUPTED is the cloud taking capacity back."""

    INTERRUPTED = "interrupted"
    EXITED = "exited"  # the job's process ended by itself; see Instance.exit_code
    TERMINATED = "terminated"  # we (or a user) terminated it
    UNKNOWN = "unknown"


@dataclass(slots=True)
class Instance:
    id: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: Market
    state: InstanceState
    tags: dict[str, str] = field(default_factory=dict)
    launched_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: EndReason | None = None
    exit_code: int | None = None
    # Set when the cloud has announced an interruption that has not happened yet.
    notice_at: datetime | None = None

    @property
    def pool(self) -> str:
        return pool_key(self.cloud, self.zone, self.instance_type, self.market)


class ProviderError(Exception):
    """Base of every error a provider raises; the message must never carry credentials."""


class CapacityUnavailable(ProviderError):
    """The pool has no capacity (or the price/quota forbids it): try another offering."""

    def __init__(self, message: str, pool: str | None = None) -> None:
        super().__init__(message)
        self.pool = pool


class QuotaExceeded(CapacityUnavailable):
    """An account limit (vCPU quota, max spot count) blocks the launch in this region."""


class Throttled(ProviderError):
    """The API asked us to slow down; retry later."""


class TransientError(ProviderError):
    """A failure that may pass (5xx, timeouts, connection resets); retry later."""


class FatalError(ProviderError):
    """A failure retrying will not fix (bad AMI, bad credentials, malformed request)."""


@runtime_checkable
class Provider(Protocol):
    """One cloud account's adapter. All methods may raise ProviderError subclasses only."""

    name: str

    def offerings(self) -> list[Offering]:
        """Everything buyable now with current prices (spot and on-demand)."""
        ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one instance; idempotent on request.token."""
        ...

    def describe(self, instance_ids: Sequence[str]) -> list[Instance]:
        """Current view of these instances; ids the cloud no longer knows come back ENDED."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Terminate these instances; terminating an ended instance is not an error."""
        ...

    def list_tagged(self, owner: str) -> list[Instance]:
        """Every live instance carrying `spotwise-owner=owner` (leak collection, adoption)."""
        ...

    def find_by_token(self, token: str) -> Instance | None:
        """The instance launched with this idempotency token, if any (adoption after a crash)."""
        ...
