"""The job lifecycle as pure functions: no database, no clock, no cloud."""

from __future__ import annotations

import pytest

from providers.base import EndReason, FailureKind
from scheduler.core.lifecycle import (
    Ended,
    JobFacts,
    LastAttempt,
    Limits,
    backoff_seconds,
    classify_end,
    next_state,
)
from scheduler.core.states import AttemptEnd, JobState

LIMITS = Limits(max_attempts=3, max_preemptions=None)


@pytest.mark.parametrize(
    ("ended", "want"),
    [
        # A trainer that checkpointed on the notice, exited 75 and powered off: AWS reports a
        # shutdown with no code; the wrapper's record (or its absence) decides, never FAILED.
        (Ended(EndReason.EXITED, None, done=False), AttemptEnd.INTERRUPTED),
        (Ended(EndReason.EXITED, 75, done=False), AttemptEnd.INTERRUPTED),
        (Ended(EndReason.EXITED, 76, done=False), AttemptEnd.INTERRUPTED),  # fenced
        (Ended(EndReason.EXITED, 3, done=False), AttemptEnd.FAILED),
        (Ended(EndReason.EXITED, 0, done=False), AttemptEnd.FINISHED),
        (Ended(EndReason.EXITED, None, done=True), AttemptEnd.FINISHED),
        (Ended(EndReason.INTERRUPTED, None, done=False), AttemptEnd.INTERRUPTED),
        (Ended(EndReason.INTERRUPTED, None, done=True), AttemptEnd.FINISHED),
        (Ended(EndReason.TERMINATED, None, False, stop_reason="budget"), AttemptEnd.BUDGET),
        (Ended(EndReason.EXITED, 75, False, stop_reason="policy"), AttemptEnd.MIGRATED),
        (Ended(EndReason.TERMINATED, None, False, stop_reason="cancel"), AttemptEnd.CANCELLED),
        (Ended(EndReason.UNKNOWN, None, done=False), AttemptEnd.LOST),
        (
            Ended(EndReason.LAUNCH_FAILED, None, False, failure=FailureKind.CAPACITY),
            AttemptEnd.LAUNCH_FAILED,
        ),
        (
            Ended(EndReason.LAUNCH_FAILED, None, False, failure=FailureKind.REJECTED),
            AttemptEnd.REJECTED,
        ),
    ],
)
def test_classify_end(ended: Ended, want: AttemptEnd) -> None:
    assert classify_end(ended) is want


def _job(**kw: object) -> JobFacts:
    base = {"state": JobState.RUNNING, "cancel_requested": False, "recoveries": 0, "failures": 0}
    base.update(kw)
    return JobFacts(**base)  # type: ignore[arg-type]


def _last(end: AttemptEnd, **kw: object) -> LastAttempt:
    return LastAttempt("j-a1", end, "aws/us-east-1a/p3.2xlarge/spot", **kw)  # type: ignore[arg-type]


def test_preemptions_recover_and_draw_on_their_own_budget() -> None:
    t = next_state(_job(), _last(AttemptEnd.INTERRUPTED), LIMITS)
    assert (t.state, t.recoveries, t.failures) == (JobState.RECOVERING, 1, 0)
    # Unlimited by default, whatever the failures so far.
    t = next_state(_job(recoveries=500, failures=2), _last(AttemptEnd.INTERRUPTED), LIMITS)
    assert t.state is JobState.RECOVERING
    capped = Limits(max_attempts=3, max_preemptions=2)
    t = next_state(_job(recoveries=2), _last(AttemptEnd.INTERRUPTED), capped)
    assert t.state is JobState.FAILED and "max_preemptions" in t.reason


def test_lost_attempts_draw_on_max_attempts_and_rejected_ones_try_another_provider() -> None:
    t = next_state(_job(), _last(AttemptEnd.REJECTED, detail="bad env name"), LIMITS)
    assert t.state is JobState.PENDING and t.failures == 0 and "bad env name" in t.reason
    # Placement avoids the provider that rejected it; not max_attempts tries on it.
    t = next_state(_job(failures=2), _last(AttemptEnd.REJECTED, detail="bad env name"), LIMITS)
    assert t.state is JobState.PENDING and "another provider" in t.reason
    t = next_state(_job(recoveries=1), _last(AttemptEnd.LOST), LIMITS)
    assert t.state is JobState.RECOVERING and t.failures == 1
    t = next_state(_job(failures=2), _last(AttemptEnd.LOST), LIMITS)
    assert t.state is JobState.FAILED and "3 attempts lost" in t.reason


def test_terminal_outcomes() -> None:
    assert next_state(_job(), _last(AttemptEnd.FINISHED), LIMITS).state is JobState.SUCCEEDED
    t = next_state(_job(), _last(AttemptEnd.FAILED, exit_code=3), LIMITS)
    assert t.state is JobState.FAILED and "code 3" in t.reason
    assert next_state(_job(), _last(AttemptEnd.BUDGET), LIMITS).state is JobState.HELD
    t = next_state(_job(cancel_requested=True), _last(AttemptEnd.INTERRUPTED), LIMITS)
    assert t.state is JobState.CANCELLED
    t = next_state(_job(), _last(AttemptEnd.LAUNCH_FAILED, detail="no capacity"), LIMITS)
    assert t.placeable and t.failures == 0


def test_backoff_is_exponential_and_capped() -> None:
    assert [backoff_seconds(n, 10, 100) for n in range(6)] == [0, 10, 20, 40, 80, 100]
    assert backoff_seconds(10_000, 10, 100) == 100
