"""The states of a job and of an attempt, and how an attempt ended: the words the lifecycle
decides in, the tables store and every command prints. Pure values, so the core decides in
them without a database (the tables in scheduler/state/models.py store them as plain text)."""

from __future__ import annotations

from enum import StrEnum


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
    INTERRUPTED = "interrupted"  # the cloud took it back (or the job exited "preempted")
    FINISHED = "finished"
    FAILED = "failed"  # the job's command failed (non-zero exit)
    CANCELLED = "cancelled"
    BUDGET = "budget"
    MIGRATED = "migrated"  # stopped by a policy to run elsewhere
    LAUNCH_FAILED = "launch_failed"  # capacity or quota: the pool was wrong
    REJECTED = "rejected"  # the cloud refused the request itself: the job is wrong
    LOST = "lost"  # the instance vanished and left no outcome
