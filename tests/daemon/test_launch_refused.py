"""A launch the account or the operator's setting refuses (a missing permission, a setting
the cloud will not take) marks no pool out of capacity: every pool would answer the same.
The job waits, backed off, with the reason naming what to fix. And an instance whose GPU
never appeared (the boot script's exit 77) is a launch that failed, not the job's failure."""

from __future__ import annotations

import pytest

from providers.base import EndReason, FailureKind, LaunchFailure, NotPermitted, SettingRefused
from scheduler.core.states import AttemptEnd, JobState

POOL = "aws/us-east-1a/p3.2xlarge/spot"
MISSING = "ec2:RunInstances on arn:aws:ec2:us-east-1:1:spot-instances-request/*"


@pytest.mark.parametrize(
    "error",
    [
        NotPermitted(
            f"aws run_instances: UnauthorizedOperation (missing permission {MISSING})", MISSING
        ),
        SettingRefused(
            "gcp launch: a3-ultragpu-8g does not boot from pd-balanced", "[providers.gcp] disk_type"
        ),
    ],
)
def test_a_refused_launch_marks_no_pool(make_world, error) -> None:
    w = make_world()
    w.provider.fail_launch[POOL] = error
    jid = w.submit(gpus="V100:1")
    w.tick()
    first = w.attempts(jid)[0]
    assert first.end_reason is AttemptEnd.LAUNCH_FAILED
    assert str(error).split(" (")[0] in (first.detail or "")
    assert not w.events("pool_unavailable")  # was: every pool it tried marked dead
    assert w.job(jid).state in (JobState.PENDING, JobState.LAUNCHING, JobState.RUNNING)


def test_a_refusal_that_arrives_later_marks_no_pool(make_world) -> None:
    w = make_world()
    w.provider.start_running = False
    w.provider.fail_later[POOL] = LaunchFailure(
        FailureKind.SETUP, "gcp insert: the setting to change: [providers.gcp] image", POOL
    )
    jid = w.submit(gpus="V100:1")
    w.tick(n=3)
    ended = [a for a in w.attempts(jid) if a.end_reason is not None]
    assert ended and ended[0].end_reason is AttemptEnd.LAUNCH_FAILED
    assert not w.events("pool_unavailable")


def test_no_gpu_on_the_instance_is_a_failed_launch_not_a_failed_job(make_world) -> None:
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=77)
    w.tick()
    first = w.attempts(jid)[0]
    assert first.end_reason is AttemptEnd.LAUNCH_FAILED
    assert w.job(jid).state is not JobState.FAILED
