"""The job lifecycle as pure functions: no database, no clock reads, no cloud.

The decisions live here, so they can be unit-tested and replayed:
- `classify_end`: how an attempt ended, from what the cloud said, what the job's wrapper wrote
  into the checkpoint store (exit code, DONE) and why we had asked it to stop;
- `classify_gang`: the same for a gang, from what each of its nodes said;
- `next_state`: what the job does next after its latest attempt ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from providers.base import EndReason, FailureKind
from scheduler.core.states import AttemptEnd, JobState
from trainer.contract import EXIT_FENCED, EXIT_NO_GPU, EXIT_PREEMPTED, EXIT_UNCLAIMED

# Why we stopped an attempt -> how it ended (a trainer that checkpointed on our SIGTERM may
# exit "preempted"; the reason we asked wins).
STOP_ENDS = {
    "budget": AttemptEnd.BUDGET,
    "policy": AttemptEnd.MIGRATED,
    "price": AttemptEnd.MIGRATED,
    "rebalance": AttemptEnd.MIGRATED,  # moved early on a rebalance recommendation
    "launch_timeout": AttemptEnd.LAUNCH_FAILED,
    "launch_failed": AttemptEnd.LAUNCH_FAILED,  # a gang that did not come up whole
    "peer": AttemptEnd.INTERRUPTED,  # another node of the gang was interrupted
    "quarantine": AttemptEnd.FAILED,  # the job failed (quarantined): not a user's cancel
    "max_duration": AttemptEnd.FAILED,  # the job ran past its wall-clock cap
    # the attempt it was placed beside ended the job (finished, failed, or its limits)
    "superseded": AttemptEnd.CANCELLED,
}
# The stop reason written on a gang when one of its nodes got a notice or ended: the other
# nodes are told to checkpoint (the trainer's all-reduced stop flag puts every rank on the
# same step) and the gang is re-placed whole.
PEER_STOP = "peer"


@dataclass(frozen=True, slots=True)
class Ended:
    """Everything known about an ended instance when its attempt's end is classified."""

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
    if e.exit_code == EXIT_NO_GPU:
        return AttemptEnd.LAUNCH_FAILED  # the box never had a working GPU: not the job's fault
    if e.exit_code == EXIT_UNCLAIMED:
        return AttemptEnd.LOST  # never handed the store: it did nothing; counts to max_attempts
    if e.exit_code in (EXIT_PREEMPTED, EXIT_FENCED) or e.reason is EndReason.INTERRUPTED:
        return AttemptEnd.INTERRUPTED
    if e.exit_code is not None:
        return AttemptEnd.FAILED
    if e.reason is EndReason.EXITED:
        return AttemptEnd.INTERRUPTED  # powered off with no record: resume from checkpoint
    if e.reason is EndReason.LAUNCH_FAILED:
        return AttemptEnd.LAUNCH_FAILED
    return AttemptEnd.LOST


def classify_gang(nodes: Sequence[Ended], stop_reason: str | None = None) -> AttemptEnd:
    """How a gang attempt ended, once every node has. DONE anywhere is success; a node that
    never ran makes it a failed launch; our own stop reasons (cancel, budget, policy) win
    next; then a cloud interruption of any node (the others exit 75 after the common
    checkpoint, or are lost with it) beats a node's non-zero exit, which fails the job only
    when no node was taken back by the cloud."""
    if any(n.done for n in nodes):
        return AttemptEnd.FINISHED
    failures = [n.failure for n in nodes if n.failure is not None]
    if failures:
        rejected = FailureKind.REJECTED in failures
        return AttemptEnd.REJECTED if rejected else AttemptEnd.LAUNCH_FAILED
    if stop_reason is not None and stop_reason != PEER_STOP:
        return STOP_ENDS.get(stop_reason, AttemptEnd.CANCELLED)
    if any(n.reason is EndReason.INTERRUPTED for n in nodes):
        return AttemptEnd.INTERRUPTED
    ends = [classify_end(replace(n, stop_reason=None)) for n in nodes]
    if AttemptEnd.FAILED in ends:
        return AttemptEnd.FAILED
    if ends and all(e is AttemptEnd.FINISHED for e in ends):
        return AttemptEnd.FINISHED
    if AttemptEnd.INTERRUPTED in ends or stop_reason == PEER_STOP:
        return AttemptEnd.INTERRUPTED
    return AttemptEnd.LOST


def gang_shortfall(up: int, nodes: int, instance_type: str, zone: str, what: str) -> str:
    """Why a gang could not be placed whole, in the words an operator reads in `status`."""
    return f"only {up} of {nodes} {instance_type} in {zone} {what}"


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
    stop_reason: str | None = None  # why we asked it to stop, if we did


@dataclass(frozen=True, slots=True)
class Limits:
    max_attempts: int  # lost attempts before the job fails
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


def next_state(job: JobFacts, last: LastAttempt, limits: Limits) -> Transition:
    """The job's next state after `last` ended."""
    waiting = JobState.RECOVERING if job.recoveries else JobState.PENDING
    end = last.end
    if end is AttemptEnd.FINISHED:  # DONE is in the store: a late cancel changes nothing
        return Transition(JobState.SUCCEEDED, "finished", "succeeded")
    if job.cancel_requested or end is AttemptEnd.CANCELLED:
        return Transition(JobState.CANCELLED, "cancelled by user", "cancelled")
    if end is AttemptEnd.FAILED and last.stop_reason == "max_duration":
        return Transition(
            JobState.FAILED, last.detail or "ran past max_duration", "failed", "warning"
        )
    if end is AttemptEnd.FAILED:
        # No exit code: the daemon ended it for the job's own fault (its store is another
        # job's, say), and the detail says why.
        why = (
            f"the job exited with code {last.exit_code}"
            if last.exit_code is not None or not last.detail
            else last.detail
        )
        return Transition(JobState.FAILED, why, "failed", "warning")
    if end is AttemptEnd.BUDGET:
        return Transition(JobState.HELD, "hard budget exhausted", "held", "warning")
    if end is AttemptEnd.MIGRATED:
        return Transition(waiting, "moving to a better offering", "moving")
    if end is AttemptEnd.LAUNCH_FAILED:
        why = last.detail or f"no capacity in {last.pool}"
        return Transition(waiting, why, "launch_failed", "warning")
    if end is AttemptEnd.INTERRUPTED:
        if limits.max_preemptions == 0:
            why = f"interrupted on {last.pool}; max_preemptions = 0: no recovery"
            return Transition(JobState.FAILED, why, "failed", "warning")
        if limits.max_preemptions is not None and job.recoveries >= limits.max_preemptions:
            why = f"gave up after {job.recoveries} preemptions (max_preemptions)"
            return Transition(JobState.FAILED, why, "failed", "warning")
        why = f"interrupted on {last.pool}; resuming from its checkpoint"
        return Transition(JobState.RECOVERING, why, "recovering", "warning", recoveries=1)
    detail = f": {last.detail}" if last.detail else ""
    if end is AttemptEnd.REJECTED:
        # The request is wrong for that provider (its own limit: EC2's 16 KB of user data):
        # placement avoids the provider for this job, and fails the job once every adequate
        # provider has rejected it. One try per provider bounds it, not max_attempts.
        why = f"attempt rejected by the cloud{detail}; trying another provider"
        return Transition(waiting, why, "attempt_rejected", "warning")
    # LOST: the attempt failed without the job's code failing.
    failures = job.failures + 1
    if failures >= limits.max_attempts:
        why = f"{failures} attempts lost (max_attempts){detail}"
        return Transition(JobState.FAILED, why, "failed", "warning", failures=1)
    return Transition(
        JobState.RECOVERING, f"attempt lost{detail}", "attempt_lost", "warning", failures=1
    )


def backoff_seconds(failures: int, base: float, cap: float) -> float:
    """Exponential per-job back-off: base, 2 base, 4 base, ... up to cap."""
    if failures <= 0:
        return 0.0
    return min(cap, base * 2 ** min(failures - 1, 30))
