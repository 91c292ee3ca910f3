"""Durable state: SQLModel tables for jobs, attempts, prices, budget spend, pools and events.

All durable state lives here (never in APScheduler's job store), so a restarted daemon picks up
exactly where the last one stopped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from scheduler.core.states import AttemptEnd, AttemptState, JobState


class UTCDateTime(TypeDecorator):
    """Stores naive UTC, returns aware UTC: SQLite keeps no time zones."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


def _utc(**kw: Any) -> Any:
    return Field(sa_type=UTCDateTime, **kw)


class EnumText(TypeDecorator):
    """A StrEnum stored as plain text: adding a value later needs no ALTER TYPE anywhere."""

    impl = sa.String(32)
    cache_ok = True

    def __init__(self, enum: type[StrEnum]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else str(value)

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else self.enum(value)


def _enum(enum: type[StrEnum], default: Any = None, **kw: Any) -> Any:
    return Field(default=default, sa_type=EnumText(enum), **kw)


class Job(SQLModel, table=True):
    id: str = Field(primary_key=True)
    name: str = Field(index=True)
    team: str = Field(default="default", index=True)
    spec_json: str
    state: JobState = _enum(JobState, JobState.PENDING, index=True)
    reason: str = ""
    checkpoint_uri: str = Field(index=True)  # one store, one unfinished job (store_use)
    created_at: datetime = _utc()
    updated_at: datetime = _utc(index=True)
    deadline: datetime | None = _utc(default=None)
    cancel_requested: bool = False
    # The last ended attempt whose outcome has been acted on (makes settling idempotent).
    settled_attempt: str | None = None
    # Set while HELD by a hard budget: released when that window resets or the limit rises.
    held_budget: str | None = None
    held_window_start: datetime | None = _utc(default=None)
    held_limit_usd: float | None = None
    # What the budget had spent when it held the job: a refund below it (an end learned late,
    # after an outage) releases the hold.
    held_spent_usd: float | None = None
    attempts: int = 0
    recoveries: int = 0  # preemptions recovered (drawn from max_preemptions)
    failures: int = 0  # attempts lost or rejected (drawn from max_attempts)
    # Per-job back-off after a failed step or launch; never placed before this time.
    not_before: datetime | None = _utc(default=None)
    step_failures: int = 0  # consecutive failed reconcile steps (quarantine after N)
    last_error: str = ""  # the last step failure, so the event is written once per reason
    cost_usd: float = 0.0
    progress_step: int | None = None
    total_steps: int | None = None
    # The Unix user who submitted it (the login user under sudo); "" before it was recorded.
    submitted_by: str = ""


# Attempts whose spend is not accrued up to their end (live ones, and ended ones until the
# next accrual): the accrual reads these through a partial index, not a scan of every
# attempt ever written. Its queries repeat this predicate verbatim (so the planner uses it).
UNACCRUED = "accrued_until IS NULL OR accrued_until != ended_at"


class Attempt(SQLModel, table=True):
    __table_args__ = (
        sa.Index(
            "ix_attempt_unaccrued",
            "state",
            sqlite_where=sa.text(UNACCRUED),
            postgresql_where=sa.text(UNACCRUED),
        ),
    )

    id: str = Field(primary_key=True)  # "<job id>-a<number>"
    job_id: str = Field(index=True, foreign_key="job.id")
    # 1, 2, ... per job, written with Job.attempts: a job's latest attempt is numbered
    # `attempts` (how `status` finds it).
    number: int
    token: str = Field(unique=True)
    provider: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    pool: str = Field(index=True)
    price_per_hour: float  # at launch; spend accrues at each interval's price
    billed_price: float | None = None  # the price of the last accrued interval
    gpu_count: int = 0  # per node
    # Instances this attempt holds (a gang's size; one AttemptInstance row each).
    nodes: int = 1
    state: AttemptState = _enum(AttemptState, AttemptState.LAUNCHING, index=True)
    instance_id: str | None = Field(default=None, index=True)  # node 0's (see AttemptInstance)
    instance_scope: str = ""  # the provider's container for it (Azure resource group)
    created_at: datetime = _utc()
    # When launch() was last called: the cloud's "not visible yet" grace counts from here.
    launch_requested_at: datetime | None = _utc(default=None)
    started_at: datetime | None = _utc(default=None)  # billing start (the cloud's launch time)
    accrued_until: datetime | None = _utc(default=None)  # spend is accrued up to here
    ended_at: datetime | None = _utc(default=None)
    stop_requested_at: datetime | None = _utc(default=None)
    stop_reason: str | None = None
    terminate_sent_at: datetime | None = _utc(default=None)  # re-asked every stop_grace
    notice_at: datetime | None = _utc(default=None)
    # An early interruption signal (AWS rebalance recommendation), and what the daemon did
    # about it: "" (not decided yet), "moved" or "waited".
    early_signal_at: datetime | None = _utc(default=None, index=True)
    early_action: str = ""
    # "auto" checkpointing: the interval (seconds) the daemon last told this attempt, at
    # launch and through the store (checkpoint_interval.json).
    checkpoint_interval_s: float | None = None
    # Placed while an earlier attempt of the job, which had a notice, was still live: that
    # attempt's id. Its store claim waits (`claim_pending`) until that attempt has ended or
    # its notice window has passed, so the old trainer's final save always lands first.
    replaces: str | None = None
    claim_pending: bool = False
    end_reason: AttemptEnd | None = _enum(AttemptEnd, None)
    exit_code: int | None = None
    detail: str = ""  # why it ended, in words (launch failures, lost)
    cost_usd: float = 0.0


class AttemptInstance(SQLModel, table=True):
    """One instance of an attempt (one node of a gang): what the cloud started for it and
    what it cost. A single-node attempt has one row (node 0) mirroring the Attempt's own
    columns; a gang's cost is the sum over its rows, each billed from its own launch to its
    own end at the price actually paid."""

    __table_args__ = (
        sa.UniqueConstraint(
            "attempt_id", "node", "round", name="uq_attemptinstance_attempt_node_round"
        ),
    )

    id: str = Field(primary_key=True)  # "<attempt id>-n<node>", "-r<round>" after round 0
    attempt_id: str = Field(index=True, foreign_key="attempt.id")
    node: int = 0
    # The rendezvous round the instance joined: 0 for the gang as launched, r for a node
    # that replaced a lost one in round r (GangRound); a node's latest round is its current.
    round: int = 0
    # Set on a replacement in another pool than the attempt's (the same zone and instance
    # type, the other market): billed at this price rather than the attempt's.
    pool: str = ""
    price_per_hour: float | None = None
    instance_id: str | None = Field(default=None, index=True)
    instance_scope: str = ""
    region: str = ""
    zone: str = ""
    state: AttemptState = _enum(AttemptState, AttemptState.LAUNCHING)  # LAUNCHING|RUNNING|ENDED
    started_at: datetime | None = _utc(default=None)  # billing start (the cloud's launch time)
    accrued_until: datetime | None = _utc(default=None)
    ended_at: datetime | None = _utc(default=None)
    notice_at: datetime | None = _utc(default=None)
    end_reason: str | None = None  # what the cloud said (providers.base.EndReason)
    exit_code: int | None = None
    cost_usd: float = 0.0


class GangRound(SQLModel, table=True):
    """One recovery of a running gang that lost nodes: the decision (replace the lost nodes,
    keep the others; or re-place the gang whole) and, for a replacement, its progress. The
    replacement nodes are AttemptInstance rows of the same attempt in this round, written
    as the intent before their launch; the survivors learn the round from the checkpoint
    store (trainer.rendezvous)."""

    __table_args__ = (sa.UniqueConstraint("attempt_id", "round"),)

    id: str = Field(primary_key=True)  # "<attempt id>-r<round>"
    attempt_id: str = Field(index=True, foreign_key="attempt.id")
    round: int
    nodes: str  # the node ranks replaced, "1" or "0,2"
    lost: str = ""  # the instances that were lost or noticed
    # replacing -> resumed (every current node runs) | abandoned (re-placed whole);
    # whole: the decision was to re-place the gang (kept for the record and the bench).
    state: str = Field(default="replacing", index=True)
    reason: str = ""  # the decision, in words, with its figures
    pool: str = ""  # where the replacements go
    price_per_hour: float = 0.0
    decided_at: datetime = _utc()
    deadline: datetime | None = _utc(default=None)  # the wait bound: re-placed whole after
    directive_at: datetime | None = _utc(default=None)  # the round written to the store
    resumed_at: datetime | None = _utc(default=None)
    ended_at: datetime | None = _utc(default=None)
    detail: str = ""


class PriceSample(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    observed_at: datetime = _utc(index=True)
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    price_per_hour: float
    pool: str = Field(index=True)


class BudgetSpend(SQLModel, table=True):
    """Each budget as the daemon enforces it (limit stored on load/reload) and its spend."""

    name: str = Field(primary_key=True)
    scope: str
    window: str
    window_start: datetime | None = _utc(default=None)
    limit_usd: float
    hard: bool
    spent_usd: float = 0.0
    burn_per_hour: float = 0.0
    state: str = "ok"  # ok | warning | exhausted
    updated_at: datetime = _utc()
    # The running total of the window's accrued spend (its buckets' sum), kept by every
    # accrual: a budget's status is this row, not a sum over the buckets. `accrued_key` names
    # what it totals (scope, window, window start); another key means it is rebuilt once.
    accrued_usd: float = 0.0
    accrued_key: str = ""


class SpendBucket(SQLModel, table=True):
    """USD accrued per attempt per UTC hour: budgets sum a window's buckets (an aggregate
    over the window, never a reload of every attempt ever written)."""

    __table_args__ = (sa.UniqueConstraint("hour", "attempt_id"),)

    id: int | None = Field(default=None, primary_key=True)
    hour: datetime = _utc(index=True)
    attempt_id: str = Field(index=True)
    job_id: str = Field(index=True)
    job_name: str
    team: str = Field(index=True)
    cloud: str = ""
    usd: float = 0.0


class DaemonLease(SQLModel, table=True):
    """Who mutates this database: the daemon's heartbeat (and, on PostgreSQL, its lease)."""

    name: str = Field(default="daemon", primary_key=True)
    holder: str  # host:pid:random, unique per daemon process
    pid: int
    host: str
    epoch: int = 0  # bumped on every takeover; writes carry it (fencing)
    started_at: datetime = _utc()
    renewed_at: datetime = _utc()
    version: str = ""
    status: str = ""  # "3 running, 2 pending, $4.10/h"
    # The configuration this daemon runs with (state.running_config), so the CLI shows
    # the budgets, teams and providers the daemon enforces rather than its own file's.
    config_json: str = ""


class PoolState(SQLModel, table=True):
    """What the daemon learned about a capacity pool: back-off and interruption history."""

    pool: str = Field(primary_key=True)
    unavailable_until: datetime | None = _utc(default=None)
    unavailable_reason: str = ""
    interruptions: int = 0
    exposure_hours: float = 0.0
    last_interrupted_at: datetime | None = _utc(default=None)
    # Gangs: at most this many instances fit until `gang_capacity_until` (a launch got
    # "only k of N" before the capacity error); smaller gangs and single nodes still fit.
    gang_capacity: int | None = None
    gang_capacity_until: datetime | None = _utc(default=None)
    gang_capacity_reason: str = ""
    # The interruption rate per hour the cloud's own risk data implies (AWS placement score,
    # GCP preemption rate, Azure eviction band), the signal it came from, and when it was read
    # (scheduler.core.hazard); the daemon's observations update it.
    prior_rate: float | None = None
    prior_source: str = ""
    prior_at: datetime | None = _utc(default=None)
    # Lengths in hours of the pool's recent outages (a JSON list, newest last), and when the
    # current one began: "avoid after interrupt" is learned from them.
    outage_hours: str = "[]"
    outage_since: datetime | None = _utc(default=None)


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    at: datetime = _utc(index=True)
    level: str = "info"
    kind: str
    job_id: str | None = Field(default=None, index=True)
    attempt_id: str | None = None
    message: str
    # The Unix user whose command caused it (submit, cancel, release, requeue); None for
    # the daemon's own decisions.
    actor: str | None = None


class LeakSeen(SQLModel, table=True):
    """When a tagged resource without a live attempt was first seen (leak grace survives a
    restart: a just-launched instance is never collected because the daemon restarted)."""

    resource_id: str = Field(primary_key=True)
    provider: str
    kind: str = "instance"
    first_seen_at: datetime = _utc()
    # Why the resource is not provably this database's ("" when it is): such a resource is
    # reported once, never terminated (another deployment with the same owner tag).
    not_ours: str = ""


class PolicyState(SQLModel, table=True):
    """What a job's deadline policy learned (pool availability, its spend ledger), so a
    restarted or reloaded daemon advises as the old one would have, not from a cold start."""

    job_id: str = Field(primary_key=True)
    policy: str  # the policy that learned it; another policy starts cold
    # What the job runs on (GPU shapes, clouds, regions): a new job with the same shape is
    # warmed from the latest such state, its zones' availability being the same markets.
    shape: str = Field(default="", index=True)
    state_json: str = "{}"
    updated_at: datetime = _utc()


class Installation(SQLModel, table=True):
    """This database's identity and the latest time its daemon read: one row.

    `install_id` is made by the migration that creates the table (the first one a database
    runs through) and goes on every resource the daemon creates: leak collection acts only
    on resources carrying it, so two deployments with the same owner in one cloud account
    never collect each other's. `clock_reading` only moves forward: a daemon whose clock is
    behind it by more than a tolerance refuses to start."""

    id: int = Field(default=1, primary_key=True)
    install_id: str
    created_at: datetime = _utc()
    clock_reading: datetime | None = _utc(default=None)


class ProviderState(SQLModel, table=True):
    """When each provider last answered `describe` for every live instance on it: spend is
    accrued up to there, so time nobody observed (the daemon down, a cloud's API failing)
    is billed once it is seen, never assumed."""

    name: str = Field(primary_key=True)
    observed_at: datetime | None = _utc(default=None)


# -- who may use the API server (state/accounts.py) ----------------------------------------
class ApiUser(SQLModel, table=True):
    """A person (or a robot) the API server knows. `role`: admin (everything), member (reads
    and acts on the jobs of `teams`) or viewer (reads them). Named `apiuser`: `user` is a
    reserved word in PostgreSQL."""

    name: str = Field(primary_key=True)
    role: str = "member"
    teams: str = ""  # comma-separated, normalised team names
    created_at: datetime = _utc()
    created_by: str = ""  # the Unix user who added it
    disabled_at: datetime | None = _utc(default=None)


class ApiToken(SQLModel, table=True):
    """An API token: only the SHA-256 of its secret is stored (the token is shown once, at
    creation); `id` is the public part every token starts with, for listing and revoking."""

    id: str = Field(primary_key=True)
    user_name: str = Field(index=True, foreign_key="apiuser.name")
    secret_sha256: str
    label: str = ""
    created_at: datetime = _utc()
    created_by: str = ""
    expires_at: datetime | None = _utc(default=None)
    revoked_at: datetime | None = _utc(default=None)


# -- budget alerts (daemon/alerts.py) -------------------------------------------------------
class BudgetAlert(SQLModel, table=True):
    """An alert already raised: one per budget, window and kind ('50%', '80%', '100%',
    'forecast'), so a restarted daemon never alerts twice for the same crossing."""

    __table_args__ = (sa.UniqueConstraint("budget", "window_key", "kind"),)

    id: int | None = Field(default=None, primary_key=True)
    budget: str = Field(index=True)
    window_key: str  # the window's start (ISO) or 'total'
    kind: str
    at: datetime = _utc()
    message: str = ""


class WebhookDelivery(SQLModel, table=True):
    """An alert waiting to be (or already) sent to the configured webhook: an outbox the
    daemon's sender thread drains with retries, so a slow or failing webhook never holds up
    a pass, and nothing queued is lost to a restart."""

    id: int | None = Field(default=None, primary_key=True)
    created_at: datetime = _utc()
    payload_json: str
    tries: int = 0
    next_try_at: datetime = _utc(index=True)
    delivered_at: datetime | None = _utc(default=None)
    gave_up_at: datetime | None = _utc(default=None)
    last_error: str = ""
