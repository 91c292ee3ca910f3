"""The job lifecycle as pure functions: no database, no clock reads, no cloud.

Two decisions live here, so they can be unit-tested and replayed:
- `classify_end`: how an attempt ended, from what the cloud said, what the job's wrapper wrote
  into the checkpoint store (exit code, DONE) and why we had asked it to stop;
- `settle`: what the job does next after its latest attempt ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.base import EndReason, FailureKind
from scheduler.models import AttemptEnd, JobState
from trainer.contract import EXIT_FENCED, EXIT_PREEMPTED

# Why we stopped an attempt -> how it ended (a trainer that checkpointed on our SIGTERM may
# exit "preempted"; the reason we asked wins).
STOP_ENDS = {
    "budget": AttemptEnd.BUDGET,
    "policy": AttemptEnd.MIGRATED,
    "price": AttemptEnd.MIGRATED,
    "launch_timeout": AttemptEnd.LAUNCH_FAILED,
}


@dataclass(frozen=True, slots=True)
class Ended:
    """Everything known about an ended instance when its attempt is settled."""

    reason: EndReason | None  # what the cloud said
    exit_code: int | None  # from the cloud, else from the store's exit record
    done: bool  # DONE is in the checkpoint store
    stop_reason: str | None = None  # why we asked it to stop, if we did
    failure: FailureKind | None = None  # a launch outcome that arrived late


def classify_end(e: Ended) -> AttemptEnd:
    """How an attempt ended. "Exited with no code and no DONE" is an interruption to recover
    (a trainer that checkpointed on the notice and powered off), never a failure."""
    if e.failure is not None:
        if e.failure is FailureKind.REJECTED:
            return AttemptEnd.REJECTED
        return AttemptEnd.LAUNCH_FAILED
    if e.done:
        return AttemptEnd.FINISHED
    if e.stop_reason is not None:
        return STOP_ENDS.get(e.stop_reason, AttemptEnd.CANCELLED)
    if e.exit_code == 0:
        # Exited cleanly without DONE: the job does not follow the progress contract; its
        # own word is that it finished.
        return AttemptEnd.FINISHED
    if e.exit_code in (EXIT_PREEMPTED, EXIT_FENCED) or e.reason is EndReason.INTERRUPTED:
        return AttemptEnd.INTERRUPTED
    if e.exit_code is not None:
        return AttemptEnd.FAILED
    if e.reason is EndReason.EXITED:
        return AttemptEnd.INTERRUPTED  # powered off with no record: resume from checkpoint
    if e.reason is EndReason.LAUNCH_FAILED:
        return AttemptEnd.LAUNCH_FAILED
    return AttemptEnd.LOST


@dataclass(frozen=True, slots=True)
class JobFacts:
    state: JobState
    cancel_requested: bool
    recoveries: int
    failures: int


@dataclass(frozen=True, slots=True)
class LastAttempt:
    id: str
    end: AttemptEnd
    pool: str
    exit_code: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Limits:
    max_attempts: int  # lost or rejected attempts before the job fails
    max_preemptions: int | None  # None: unlimited


@dataclass(frozen=True, slots=True)
class Transition:
    state: JobState
    reason: str
    event: str  # the audit event kind
    level: str = "info"
    recoveries: int = 0  # added to the job's counters
    failures: int = 0

    @property
    def placeable(self) -> bool:
        return self.state in (JobState.PENDING, JobState.RECOVERING)


def settle(job: JobFacts, last: LastAttempt, limits: Limits) -> Transition:
    """The job's next state after `last` ended."""
    waiting = JobState.RECOVERING if job.recoveries else JobState.PENDING
    end = last.end
    if end is AttemptEnd.FINISHED:  # DONE is in the store: a late cancel changes nothing
        return Transition(JobState.SUCCEEDED, "finished", "succeeded")
    if job.cancel_requested or end is AttemptEnd.CANCELLED:
        return Transition(JobState.CANCELLED, "cancelled by user", "cancelled")
    if end is AttemptEnd.FAILED:
        why = f"the job exited with code {last.exit_code}"
        return Transition(JobState.FAILED, why, "failed", "warning")
    if end is AttemptEnd.BUDGET:
        return Transition(JobState.HELD, "hard budget exhausted", "held", "warning")
    if end is AttemptEnd.MIGRATED:
        return Transition(waiting, "moving to a better offering", "moving")
    if end is AttemptEnd.LAUNCH_FAILED:
        why = last.detail or f"no capacity in {last.pool}"
        return Transition(waiting, why, "launch_failed", "warning")
    if end is AttemptEnd.INTERRUPTED:
        if limits.max_preemptions is not None and job.recoveries >= limits.max_preemptions:
            why = f"gave up after {job.recoveries} preemptions (max_preemptions)"
            return Transition(JobState.FAILED, why, "failed", "warning")
        why = f"interrupted on {last.pool}; resuming from its checkpoint"
        return Transition(JobState.RECOVERING, why, "recovering", "warning", recoveries=1)
    # LOST or REJECTED: the attempt failed without the job's code failing.
    failures = job.failures + 1
    what = "rejected by the cloud" if end is AttemptEnd.REJECTED else "lost"
    detail = f": {last.detail}" if last.detail else ""
    if failures >= limits.max_attempts:
        why = f"{failures} attempts {what} (max_attempts){detail}"
        return Transition(JobState.FAILED, why, "failed", "warning", failures=1)
    recover = JobState.RECOVERING if end is AttemptEnd.LOST else waiting
    return Transition(
        recover, f"attempt {what}{detail}", f"attempt_{end.value}", "warning", failures=1
    )


def backoff_seconds(failures: int, base: float, cap: float) -> float:
    """Exponential per-job back-off: base, 2 base, 4 base, ... up to cap."""
    if failures <= 0:
        return 0.0
    return min(cap, base * 2 ** min(failures - 1, 30))
