"""The provider contract: value types every cloud adapter speaks, and the Provider protocol.

Providers speak one cloud's API and make no decisions: they list what can be bought, launch
exactly what they are told (idempotently), report what they see and terminate on request.
Everything here is plain data so the scheduler can persist it and tests can build it by hand.

Shaped for three clouds and gangs, not for EC2 alone:
- resources are addressed by `ResourceRef` (id, region, zone, scope, launched_at): GCE needs
  the zone, Azure the resource group, and nothing the adapter needs may live only in memory;
- a launch may complete later: `launch` returns PENDING instances and the outcome
  (running, or a capacity/quota/rejection failure) arrives through `describe`;
- a request carries a count and a placement group (gangs), every tagged resource can be
  listed (Azure leaves NICs, disks and IPs), and each adapter states its `Capabilities`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol, runtime_checkable

# Tag keys put on every resource we create; leak collection finds resources by them.
TAG_JOB = "spotwise-job"
TAG_ATTEMPT = "spotwise-attempt"
TAG_OWNER = "spotwise-owner"
TAG_NODE = "spotwise-node"  # the node index inside a gang (0 for single-node jobs)
# The database (deployment) that launched it: leak collection touches only its own, since
# two deployments may share an owner in one account.
TAG_INSTALL = "spotwise-install"


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
    gpu_model: str  # canonical (providers.gpus), e.g. "A100", "H100", "V100"; "" for CPU-only
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


class RiskKind(StrEnum):
    """The clouds' own risk data for spot capacity (scheduler.core.hazard reads each)."""

    AWS_PLACEMENT_SCORE = "aws-placement-score"  # 1-10, GetSpotPlacementScores
    GCP_ESTIMATED_UPTIME = "gcp-estimated-uptime"  # hours, advice.capacity
    # share of the Spot VMs that stopped which GCE preempted, 0-1 (advice.capacityHistory)
    GCP_PREEMPTION_HISTORY = "gcp-preemption-history"
    AZURE_EVICTION_RATE = "azure-eviction-rate"  # percent per hour (a band's middle)
    AZURE_PLACEMENT_SCORE = "azure-placement-score"  # High / Medium / Low in `detail`


@dataclass(frozen=True, slots=True)
class RiskSignal:
    """One cloud's word on one spot pool's risk, as it gave it (no decision made)."""

    pool: str  # pool_key(...) of the spot pool it is about
    kind: RiskKind
    value: float
    detail: str = ""  # the cloud's own words where they are not a number (a band, a score)


class ResourceKind(StrEnum):
    INSTANCE = "instance"
    NIC = "nic"
    DISK = "disk"
    ADDRESS = "address"
    PLACEMENT_GROUP = "placement-group"


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """Everything an adapter needs to find a resource again, persisted by the scheduler."""

    id: str
    region: str = ""
    zone: str = ""
    scope: str = ""  # a provider-specific container (Azure resource group); opaque to us
    launched_at: datetime | None = None
    kind: ResourceKind = ResourceKind.INSTANCE


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Launch `count` instances of one offering for one attempt.

    `token` is deterministic per attempt: launching twice with the same token must not create
    more instances (EC2 ClientToken, GCE requestId, a deterministic Azure VM name). A gang
    (`count` > 1) is one token family: node i is `node_token(i)` where a cloud needs one each.
    """

    token: str
    offering: Offering
    command: Sequence[str]
    env: Mapping[str, str]
    tags: Mapping[str, str]
    count: int = 1
    placement_group: str | None = None
    # The job's price cap per instance-hour (its `max_price_per_hour`), for the clouds that
    # take one for spot capacity (EC2 SpotOptions.MaxPrice, Azure billingProfile.maxPrice):
    # above it the cloud reclaims the instance. None: no cap beyond the cloud's own.
    max_price_per_hour: float | None = None
    # One node of a running gang, launched alone to replace a lost one (count 1): its rank.
    # The adapter tags it as that node, gives it that rank, and, for node 0, its own address
    # as the rendezvous endpoint, as it does for the nodes of a whole gang.
    gang_node: int | None = None

    def node_token(self, node: int) -> str:
        return self.token if self.count == 1 else f"{self.token}-n{node}"

    def node_of(self, index: int) -> int:
        """The gang rank of the `index`-th instance this request starts."""
        return self.gang_node if self.gang_node is not None else index

    @property
    def gang(self) -> bool:
        """Instances of a gang (a whole one, or one node replacing a lost one)."""
        return self.count > 1 or self.gang_node is not None


class InstanceState(StrEnum):
    PENDING = "pending"  # accepted; may still fail (the failure then arrives in describe)
    RUNNING = "running"
    ENDED = "ended"
    NOT_FOUND = "not-found"  # the cloud does not show it: not visible yet, or long gone


class EndReason(StrEnum):
    """Why an instance is gone; only INTERRUPTED is the cloud taking capacity back."""

    INTERRUPTED = "interrupted"
    EXITED = "exited"  # the job's process ended by itself; see Instance.exit_code
    TERMINATED = "terminated"  # we (or a user) terminated it
    LAUNCH_FAILED = "launch-failed"  # it never ran; see Instance.failure
    UNKNOWN = "unknown"


class FailureKind(StrEnum):
    CAPACITY = "capacity"  # the pool is out of capacity: mark the pool
    QUOTA = "quota"  # an account limit in that region: mark the pool
    REJECTED = "rejected"  # the request is wrong (this job's): fail the attempt
    FATAL = "fatal"  # the provider is misconfigured (credentials, image): mark the pool
    # The account or the operator's config refused it (a missing permission, a setting the
    # cloud will not take): no pool is at fault, so none is marked; the job waits.
    SETUP = "setup"


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    """A launch outcome that arrived after `launch` returned (GCE operations, Azure pollers)."""

    kind: FailureKind
    message: str
    pool: str | None = None
    # A gang launch: how many instances the pool held before the failure (GCE's bulk
    # operation says so), so gangs larger than that skip the pool for a while.
    held: int | None = None

    def to_error(self) -> ProviderError:
        cls = {
            FailureKind.CAPACITY: CapacityUnavailable,
            FailureKind.QUOTA: QuotaExceeded,
        }.get(self.kind)
        if cls is not None:
            return cls(self.message, pool=self.pool)
        if self.kind is FailureKind.REJECTED:
            return LaunchRejected(self.message)
        if self.kind is FailureKind.SETUP:
            return SetupError(self.message)
        return FatalError(self.message)


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
    # An early interruption signal: the cloud sees the instance at elevated risk (AWS
    # rebalance recommendation), not yet a notice.
    early_signal_at: datetime | None = None
    failure: LaunchFailure | None = None  # with end_reason LAUNCH_FAILED
    scope: str = ""
    node: int = 0

    @property
    def pool(self) -> str:
        return pool_key(self.cloud, self.zone, self.instance_type, self.market)

    @property
    def ref(self) -> ResourceRef:
        return ResourceRef(self.id, self.region, self.zone, self.scope, self.launched_at)

    @property
    def live(self) -> bool:
        return self.state in (InstanceState.PENDING, InstanceState.RUNNING)


def not_found(ref: ResourceRef, cloud: str) -> Instance:
    """What describe() reports for a ref the cloud does not show."""
    return Instance(
        id=ref.id,
        cloud=cloud,
        region=ref.region,
        zone=ref.zone,
        instance_type="",
        market=Market.ON_DEMAND,
        state=InstanceState.NOT_FOUND,
        launched_at=ref.launched_at,
        scope=ref.scope,
    )


@dataclass(frozen=True, slots=True)
class TaggedResource:
    """Anything carrying our owner tag (leak collection): instances and what they leave."""

    ref: ResourceRef
    tags: Mapping[str, str]
    live: bool  # instances: pending or running; other kinds: exists
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """Something the daemon should record (a price fallback, a skipped region)."""

    message: str
    level: str = "warning"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the scheduler must know about one cloud's API to drive it safely."""

    # Tag/label rules: GCE labels are lowercase [a-z0-9_-], at most 63 characters.
    label_max_length: int = 255
    label_pattern: str = r"[\x20-\x7e]"  # one allowed character
    lowercase_labels: bool = False
    # How long the cloud remembers a launch token; None: forever (deterministic names).
    # Past it, launching again with the same token could start a second instance.
    idempotency_window: timedelta | None = None
    # How long a just-launched instance may be missing from describe (eventual consistency).
    visibility_delay: timedelta = timedelta(0)
    launch_completes_later: bool = False
    max_count: int = 1  # instances one request may launch (gangs)
    placement_groups: bool = False
    # Resources (NICs, disks, addresses) that can outlive their instance and need collecting.
    leaves_resources: bool = False
    # From an interruption notice to the instance's certain end (in this provider's clock):
    # the longest an attempt placed beside a noticed one waits for it to finish saving.
    notice_window: timedelta = timedelta(minutes=2)

    def label(self, value: str) -> str:
        """A tag value as this cloud stores it (so the scheduler compares like with like)."""
        if self.lowercase_labels:
            value = value.lower()
        if not _all_allowed(self.label_pattern).fullmatch(value):  # the rare case: rewrite
            allowed = re.compile(self.label_pattern)
            value = "".join(c if allowed.fullmatch(c) else "_" for c in value)
        return value[: self.label_max_length]


@functools.cache
def _all_allowed(char_pattern: str) -> re.Pattern[str]:
    """A string made only of characters `char_pattern` allows (one regex call per label
    rather than one per character: labels are written for every launch)."""
    return re.compile(f"(?:{char_pattern})*")


class ProviderError(Exception):
    """Base of every error a provider raises; the message must never carry credentials."""


class CapacityUnavailable(ProviderError):
    """The pool has no capacity (or the price forbids it): mark the pool, try another."""

    def __init__(self, message: str, pool: str | None = None) -> None:
        super().__init__(message)
        self.pool = pool


class QuotaExceeded(CapacityUnavailable):
    """An account limit (vCPU quota, max spot count) blocks the launch in this region."""


class LaunchRejected(ProviderError):
    """The request itself is wrong (bad env name, user data too large, no subnet in a zone):
    fail this attempt; the pool is fine for every other job."""


class Throttled(ProviderError):
    """The API asked us to slow down; retry later."""


class TransientError(ProviderError):
    """A failure that may pass (5xx, timeouts, connection resets); retry later."""


class FatalError(ProviderError):
    """A failure retrying will not fix and that is not the request's fault (bad credentials,
    a configured image that does not exist)."""


class SetupError(FatalError):
    """The account or the operator's configuration refused the call, the same for every pool:
    nothing is out of capacity, so no pool is marked; the message names what to change."""


class NotPermitted(SetupError):
    """The credentials lack a permission; `permission` names it (e.g. "ec2:RunInstances on
    spot-instances-request"), and the message says which policy or role grants it."""

    def __init__(self, message: str, permission: str = "") -> None:
        super().__init__(message)
        self.permission = permission


class SettingRefused(SetupError):
    """The cloud will not take an operator setting; `key` names it as the config file does
    (e.g. "[providers.gcp] disk_type"), so the fix is one edit."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


@runtime_checkable
class Provider(Protocol):
    """One cloud account's adapter. All methods may raise ProviderError subclasses only."""

    name: str
    capabilities: Capabilities

    def offerings(self) -> list[Offering]:
        """Everything buyable now with current prices (spot and on-demand)."""
        ...

    def launch(self, request: LaunchRequest) -> list[Instance]:
        """Launch `request.count` instances; idempotent on request.token. Instances may come
        back PENDING, their outcome arriving later through describe()."""
        ...

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        """Current view of these instances, one per ref; unknown ones come back NOT_FOUND."""
        ...

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        """Terminate or delete these resources (any kind); gone ones are not an error."""
        ...

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        """Every resource carrying `spotwise-owner=owner` (leak collection)."""
        ...

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        """The instances launched with this idempotency token (adoption after a crash);
        `region` narrows the search where the caller knows it."""
        ...

    def drain_events(self) -> list[ProviderEvent]:
        """Events since the last call (price fallbacks, skipped regions); cleared."""
        ...
