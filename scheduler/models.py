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


class JobState(StrEnum):
    PENDING = "PENDING"
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    HELD = "HELD"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class AttemptState(StrEnum):
    LAUNCHING = "LAUNCHING"  # intent written; the cloud may or may not have the instance yet
    RUNNING = "RUNNING"  # instance id known
    STOPPING = "STOPPING"  # we asked it to stop (cancel, budget); waiting for it to end
    ENDED = "ENDED"


class AttemptEnd(StrEnum):
    INTERRUPTED = "interrupted"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET = "budget"
    MIGRATED = "migrated"  # stopped by the deadline policy to run elsewhere
    LAUNCH_FAILED = "launch_failed"
    LOST = "lost"


class Job(SQLModel, table=True):
    id: str = Field(primary_key=True)
    name: str = Field(index=True)
    team: str = Field(default="default", index=True)
    spec_json: str
    state: JobState = Field(default=JobState.PENDING, index=True)
    reason: str = ""
    checkpoint_uri: str
    created_at: datetime = _utc()
    updated_at: datetime = _utc()
    deadline: datetime | None = _utc(default=None)
    cancel_requested: bool = False
    # The last ended attempt whose outcome has been acted on (makes settling idempotent).
    settled_attempt: str | None = None
    # Set while HELD by a hard budget: released when that window resets or the limit rises.
    held_budget: str | None = None
    held_window_start: datetime | None = _utc(default=None)
    held_limit_usd: float | None = None
    attempts: int = 0
    recoveries: int = 0
    cost_usd: float = 0.0
    progress_step: int | None = None
    total_steps: int | None = None


class Attempt(SQLModel, table=True):
    id: str = Field(primary_key=True)  # "<job id>-a<number>"
    job_id: str = Field(index=True, foreign_key="job.id")
    number: int
    token: str = Field(unique=True)
    provider: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    pool: str = Field(index=True)
    price_per_hour: float
    gpu_count: int = 0
    state: AttemptState = Field(default=AttemptState.LAUNCHING, index=True)
    instance_id: str | None = Field(default=None, index=True)
    created_at: datetime = _utc()
    started_at: datetime | None = _utc(default=None)
    ended_at: datetime | None = _utc(default=None)
    stop_requested_at: datetime | None = _utc(default=None)
    stop_reason: str | None = None
    end_reason: AttemptEnd | None = None
    exit_code: int | None = None
    cost_usd: float = 0.0


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
    """The latest accrued spend per budget, materialised by the accrue task for the CLI."""

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


class PoolState(SQLModel, table=True):
    """What the daemon learned about a capacity pool: back-off and interruption history."""

    pool: str = Field(primary_key=True)
    unavailable_until: datetime | None = _utc(default=None)
    unavailable_reason: str = ""
    interruptions: int = 0
    exposure_hours: float = 0.0
    last_interrupted_at: datetime | None = _utc(default=None)


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    at: datetime = _utc(index=True)
    level: str = "info"
    kind: str
    job_id: str | None = Field(default=None, index=True)
    attempt_id: str | None = None
    message: str


class SchemaVersion(SQLModel, table=True):
    id: int = Field(default=1, primary_key=True)
    version: int
