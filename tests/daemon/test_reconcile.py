"""The job state machine, driven by the real Reconciler over an in-memory provider."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from providers.base import CapacityUnavailable, EndReason, FatalError, Throttled
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.daemon.reconcile import Reconciler


def test_places_on_cheapest_and_succeeds(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.pool == "aws/us-east-1a/p3.2xlarge/spot" and a.state is AttemptState.RUNNING
    assert w.job(jid).state is JobState.RUNNING
    req = w.provider.last_request
    assert req.env["SPOTWISE_JOB_ID"] == jid and req.env["SPOTWISE_ATTEMPT"] == "1"
    assert req.env["SPOTWISE_CHECKPOINT_URI"].endswith(jid)
    assert req.tags == {
        "spotwise-job": jid,
        "spotwise-attempt": a.id,
        "spotwise-owner": "spotwise",
        "spotwise-install": w.rec.install_id,
        "spotwise-node": "0",
    }
    w.tick(3600)  # one hour of running at $0.9/h
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.SUCCEEDED
    (a,) = w.attempts(jid)
    assert a.end_reason is AttemptEnd.FINISHED
    # Billed from the cloud's launch time to its end time: exactly one hour.
    assert a.cost_usd == pytest.approx(0.9, rel=1e-6)
    assert job.cost_usd == pytest.approx(a.cost_usd)


def test_interruption_recovers_on_another_pool(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    first = w.attempts(jid)[0]
    w.tick(600)
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    w.tick()
    job = w.job(jid)
    assert job.recoveries == 1
    attempts = w.attempts(jid)
    assert attempts[0].end_reason is AttemptEnd.INTERRUPTED
    # The next attempt avoids the pool that was just preempted.
    assert len(attempts) == 2 and attempts[1].pool == "aws/us-east-1b/p3.2xlarge/spot"
    assert job.state is JobState.RUNNING
    assert [e.kind for e in w.events("recovering")] == ["recovering"]
    # The trainer's own "preempted" exit code is an interruption too.
    w.provider.end(attempts[1].instance_id, EndReason.EXITED, exit_code=75)
    w.tick()
    assert w.job(jid).recoveries == 2
    assert len(w.attempts(jid)) == 3


def test_capacity_error_marks_pool_and_moves_on(make_world):
    w = make_world()
    w.provider.fail_launch["aws/us-east-1a/p3.2xlarge/spot"] = CapacityUnavailable(
        "InsufficientInstanceCapacity", pool="aws/us-east-1a/p3.2xlarge/spot"
    )
    jid = w.submit(gpus="V100:1")
    w.tick()
    attempts = w.attempts(jid)
    assert [a.end_reason for a in attempts] == [AttemptEnd.LAUNCH_FAILED, None]
    assert attempts[1].pool == "aws/us-east-1b/p3.2xlarge/spot"
    assert w.job(jid).state is JobState.RUNNING
    assert w.events("pool_unavailable")
    # A second job skips the marked pool without even trying it (TTL not over).
    calls = w.provider.launch_calls
    jid2 = w.submit(name="two", gpus="V100:1")
    w.tick()
    assert w.provider.launch_calls == calls + 1
    assert w.attempts(jid2)[0].pool == "aws/us-east-1b/p3.2xlarge/spot"


@pytest.mark.slow
def test_transient_error_retries_with_same_token(make_world):
    w = make_world()
    pool = "aws/us-east-1a/p3.2xlarge/spot"
    w.provider.fail_launch[pool] = Throttled("RequestLimitExceeded")
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.LAUNCHING and a.instance_id is None
    del w.provider.fail_launch[pool]
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING and len(w.provider.instances) == 1


def test_unplaceable_job_explains_itself(make_world):
    w = make_world()
    jid = w.submit(gpus="A100:8", max_price_per_hour=20, clouds=["aws", "gcp"])
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.PENDING
    assert job.reason == "no offering with 8x A100 under $20/h in aws,gcp"


def test_failed_job_and_fatal_launch(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    a = w.attempts(jid)[0]
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=3)
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.FAILED and "code 3" in job.reason


def test_cancel_stops_instance(make_world):
    from scheduler.state.desired import cancel

    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    cancel(w.rec.engine, jid, w.clock.now())
    w.tick()
    assert w.provider.running() == []
    w.tick()
    assert w.job(jid).state is JobState.CANCELLED
    assert w.attempts(jid)[0].end_reason is AttemptEnd.CANCELLED


@pytest.mark.slow
def test_hard_budget_holds_job_and_is_never_overrun(make_world):
    # $1 budget, $0.9/h spot: runs about an hour, then is stopped before crossing $1.
    w = make_world(
        budgets=[{"name": "team", "scope": "team:ml", "limit_usd": 1.0, "window": "total"}]
    )
    jid = w.submit(gpus="V100:1", team="ml")
    w.tick()
    assert w.job(jid).state is JobState.RUNNING
    w.tick_until(lambda: w.job(jid).state is JobState.HELD and not w.provider.running(), 30, 200)
    job = w.job(jid)
    assert job.state is JobState.HELD and "hard budget 'team'" in job.reason
    w.tick(30, n=3)
    job = w.job(jid)
    assert job.state is JobState.HELD  # nothing relaunched
    assert 0.9 < job.cost_usd <= 1.0
    assert [a.end_reason for a in w.attempts(jid)] == [AttemptEnd.BUDGET]


def test_budget_headroom_blocks_launch(make_world):
    """A budget that cannot pay one accrual interval of any offering holds the job until its
    window resets or its limit is raised (it waited PENDING before; in a total window, for
    ever)."""
    w = make_world(budgets=[{"name": "tiny", "limit_usd": 0.001, "window": "day"}])
    jid = w.submit(gpus="V100:1")
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.HELD and "budget 'tiny'" in job.reason
    assert w.provider.launch_calls == 0


def test_soft_budget_warns(make_world):
    w = make_world(budgets=[{"name": "soft", "limit_usd": 0.1, "window": "day", "hard": False}])
    jid = w.submit(gpus="V100:1")
    w.tick(n=2)
    w.tick(3600)
    assert w.job(jid).state is JobState.RUNNING
    assert w.events("budget_warning")


def test_leaked_instance_terminated_after_grace(make_world):
    from providers.base import LaunchRequest

    w = make_world(leak_grace="5m")
    o = w.provider.offerings()[0]
    (leaked,) = w.provider.launch(LaunchRequest("stray", o, ["x"], {}, _ours(w, "gone")))
    (foreign,) = w.provider.launch(
        LaunchRequest("other", o, ["x"], {}, {"spotwise-owner": "someone"})
    )
    w.tick()
    assert w.provider.instances[leaked.id].state.value == "running"
    w.tick(400)
    assert w.provider.instances[leaked.id].end_reason is EndReason.TERMINATED
    assert w.provider.instances[foreign.id].state.value == "running"
    assert w.events("leak_terminated")


def _ours(w, attempt: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The tags of a resource provably this database's: its install id and a job it knows
    (a cancelled one here), with no live attempt owning it."""
    jid = w.submit(name="gone", gpus="H100:16")  # never placed: no instance of its own
    return {
        "spotwise-owner": "spotwise",
        "spotwise-attempt": attempt,
        "spotwise-install": w.rec.install_id,
        "spotwise-job": jid,
    }


@pytest.mark.parametrize("step", ["after_intent", "after_launch", "after_record"])
@pytest.mark.slow
def test_crash_at_each_step_never_launches_twice(make_world, step):
    w = make_world()

    def crash(name: str) -> None:
        if name == step:
            raise CrashForTest(name)

    crashing = Reconciler(w.rec.engine, w.rec.config, w.rec.providers, w.clock, crash_hook=crash)
    crashing.poll_prices()
    jid = w.submit(gpus="V100:1")
    with pytest.raises(CrashForTest):
        crashing.reconcile()
    # A new daemon process over the same database and cloud.
    for _ in range(3):
        w.tick()
    assert len(w.provider.instances) == 1
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING and a.instance_id in w.provider.instances
    assert w.job(jid).state is JobState.RUNNING


def test_one_bad_job_does_not_stop_others(make_world, monkeypatch):
    w = make_world()
    bad = w.submit(name="bad", gpus="V100:1")
    good = w.submit(name="good", gpus="V100:1")
    from sqlmodel import Session

    from scheduler.state.models import Job

    with Session(w.rec.engine) as s:
        j = s.get(Job, bad)
        j.spec_json = "{not json"
        s.add(j)
        s.commit()
    w.tick()
    assert w.job(good).state is JobState.RUNNING
    job = w.job(bad)
    assert job.state is JobState.FAILED and "Invalid JSON" in job.reason


def test_fatal_launch_error_moves_to_next_offering(make_world):
    w = make_world()
    w.provider.fail_launch["aws/us-east-1a/p3.2xlarge/spot"] = FatalError("InvalidAMIID.Malformed")
    jid = w.submit(gpus="V100:1")
    w.tick()
    assert w.attempts(jid)[-1].state is AttemptState.RUNNING


@pytest.mark.parametrize("policy", ["greedy", "spotwise"])
@pytest.mark.slow
def test_deadline_job_waits_for_spot_then_uses_on_demand(make_world, policy):
    from datetime import timedelta

    from tests.support.fakes import offering

    # Only on-demand is offered (spot is out). 10 h of work, deadline in 30 h: plenty of slack.
    w = make_world(
        offerings=[offering("us-east-1a", price=3.06, market="on-demand")],
        policy={"deadline_policy": policy, "restart_overhead": "6m"},
        reconcile_interval="30m",
    )
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.PENDING and "waiting for cheaper spot capacity" in job.reason
    assert w.provider.launch_calls == 0
    # Time passes with no spot: before the slack runs out the policy goes on-demand.
    w.tick_until(lambda: bool(w.attempts(jid)), 1800, 80)
    (a,) = w.attempts(jid)
    assert a.market == "on-demand"
    assert a.created_at > job.created_at + timedelta(hours=10)  # it did wait for spot
    assert a.created_at <= w.job(jid).deadline - timedelta(hours=10.1)  # and still makes it


def test_deadline_job_takes_spot_when_available(make_world):
    w = make_world(policy={"deadline_policy": "greedy"})
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.market == "spot" and a.zone == "us-east-1a"


def test_spotwise_waits_for_a_new_spot_spell_to_last_and_says_why(make_world):
    """A short job with a 1 h restart: its cost guard's margin pays for few failed launches.
    Spot already up at its first look is launched into at once (its age is unknown); once
    interrupted, spotwise lets the spell it sees begin stay up half a restart first."""
    from tests.support.fakes import offering

    spot = offering("us-east-1a", price=1.0)
    od = offering("us-east-1a", price=3.06, market="on-demand")
    w = make_world(
        offerings=[spot, od],
        policy={"deadline_policy": "spotwise", "restart_overhead": "1h"},
        reconcile_interval="10m",
    )
    jid = w.submit(gpus="V100:1", gpu_hours=12, deadline="24h")
    w.tick()
    (first,) = w.attempts(jid)
    assert first.market == "spot"
    w.clock.advance(600)
    w.provider.set_offerings([od])  # the pool loses its capacity
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    w.tick(1)
    w.tick(600)
    assert len(w.attempts(jid)) == 1 and w.job(jid).state is JobState.RECOVERING
    w.provider.set_offerings([spot, od])  # and gets it back
    wait = "waiting for spot in us-east-1a to stay up 30 min, up 0 s so far"
    # the catalog sees it on its next refresh
    w.tick_until(lambda: wait in w.job(jid).reason, 600, 3)
    job = w.job(jid)
    assert job.state is JobState.RECOVERING and len(w.attempts(jid)) == 1
    assert wait in job.reason
    back = w.clock.now()
    w.tick_until(lambda: len(w.attempts(jid)) > 1, 600, 6)
    second = w.attempts(jid)[-1]
    assert second.market == "spot" and second.zone == "us-east-1a"
    assert second.created_at >= back + timedelta(minutes=30)


def test_bad_deadline_policy_rejected():
    from scheduler.core.config import parse_config
    from scheduler.core.errors import UserError

    with pytest.raises(UserError, match="unknown deadline policy 'optimal'"):
        parse_config('[policy]\ndeadline_policy = "optimal"\n', "<f>")


@pytest.mark.slow
def test_held_job_released_when_limit_raised(make_world):
    from scheduler.core.config import BudgetSettings

    w = make_world(
        budgets=[{"name": "team", "scope": "team:ml", "limit_usd": 1.0, "window": "total"}]
    )
    jid = w.submit(gpus="V100:1", team="ml")
    w.tick_until(lambda: w.job(jid).state is JobState.HELD and not w.provider.running(), 30, 200)
    w.tick(30, n=2)
    assert w.job(jid).state is JobState.HELD
    raised = w.rec.config.model_copy(
        update={
            "budgets": [BudgetSettings(name="team", scope="team:ml", limit_usd=5.0, window="total")]
        }
    )
    w.rec.config = raised
    w.tick(30)
    job = w.job(jid)
    assert job.state is JobState.RUNNING and len(w.attempts(jid)) == 2
    assert [e.kind for e in w.events("released")] == ["released"]


def test_a_waiting_job_its_budget_can_no_longer_pay_is_held_not_left_waiting(make_world):
    """One job spends a total budget down and is held; another job of the team waited on it
    for ever ("budget 'team' cannot pay $0.90/h for one accrual interval"): a total window
    never resets. The kill -9 campaign found such a job RECOVERING at the end. It is held
    under the budget now, and released with the first job when the limit is raised."""
    from scheduler.core.config import BudgetSettings

    budget = {"name": "team", "scope": "team:ml", "limit_usd": 0.02, "window": "total"}
    w = make_world(budgets=[budget])
    first = w.submit(name="first", gpus="V100:1", team="ml")
    w.tick_until(lambda: w.job(first).state is JobState.HELD, 5, 20)
    assert w.job(first).state is JobState.HELD
    second = w.submit(name="second", gpus="V100:1", team="ml")
    w.tick()
    job = w.job(second)
    assert job.state is JobState.HELD and job.held_budget == "team"
    assert "cannot pay $0.90/h" in job.reason and "held until budget 'team'" in job.reason
    assert w.provider.launch_calls == 1  # the first job's only
    w.tick(30, n=3)
    assert w.job(second).state is JobState.HELD  # no churn at the limit
    assert [e.job_id for e in w.events("held")] == [first, second]
    w.rec.config = w.rec.config.model_copy(
        update={"budgets": [BudgetSettings(**{**budget, "limit_usd": 5.0})]}
    )
    w.tick(30)
    assert {w.job(j).state for j in (first, second)} == {JobState.RUNNING}


def test_a_job_whose_affordable_pool_is_backing_off_waits_for_it_not_held(make_world):
    """Interrupted in the $0.90 pool, the job avoids it for a while; what is left of the
    budget cannot pay the $2 pool but can pay the $0.90 one: it waits for the back-off, and
    goes back there (a hold would wait for a new window or limit)."""
    from tests.support.fakes import offering

    w = make_world(
        offerings=[offering("us-east-1a", price=0.9), offering("us-east-1b", price=2.0)],
        budgets=[{"name": "team", "scope": "team:ml", "limit_usd": 0.175, "window": "total"}],
    )
    jid = w.submit(gpus="V100:1", team="ml")
    w.tick()
    (first,) = w.attempts(jid)
    assert first.pool.startswith("aws/us-east-1a")
    w.tick(600)
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    w.tick()
    assert w.job(jid).state is JobState.RECOVERING
    for _ in range(40):  # the pool is avoided for avoid_after_interrupt (30 min)
        w.tick(60)
        assert w.job(jid).state is not JobState.HELD
        if w.job(jid).state is JobState.RUNNING:
            break
    assert w.job(jid).state is JobState.RUNNING
    assert w.attempts(jid)[-1].pool.startswith("aws/us-east-1a")


@pytest.mark.slow
def test_deadline_policy_moves_running_job_back_to_spot(make_world):
    """UP runs on-demand while behind; once ahead of its line and spot is back, it moves."""
    from tests.support.fakes import offering

    od = offering("us-east-1a", price=3.06, market="on-demand")
    w = make_world(
        offerings=[od],
        policy={"deadline_policy": "uniform-progress", "restart_overhead": "6m"},
        reconcile_interval="30m",
    )
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.market == "on-demand"
    w.tick(1800, n=10)  # 5 h on-demand: 5 h of work done, the uniform line is at 1.7 h
    ckpt = w.tmp / "ckpt" / jid
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "progress.json").write_text(json.dumps({"step": 500, "total_steps": 1000}))
    w.provider._offerings.append(offering("us-east-1b", price=0.9))
    w.rec.poll_prices()
    w.tick(1800, n=3)
    attempts = w.attempts(jid)
    assert attempts[0].end_reason is AttemptEnd.MIGRATED
    assert attempts[-1].market == "spot" and attempts[-1].state is AttemptState.RUNNING
    assert w.job(jid).recoveries == 0  # a move by policy is not a recovery
    assert w.events("policy_move")
    # On spot to stay: no further moves while nothing changes.
    w.tick(1800, n=3)
    assert len(w.attempts(jid)) == len(attempts)


@pytest.mark.parametrize("window", ["day", "total"])
def test_two_jobs_in_one_pass_share_the_budget_headroom(make_world, window):
    # Each $40/h job must be affordable for the hold window (accrue 30 s + stop grace 30 s):
    # one reserves $0.67 of the $1 budget, so the second must wait in the same pass. It is
    # not held (the headroom frees up when the first ends, in any window) and launches then.
    from scheduler.state.desired import cancel
    from tests.support.fakes import offering

    w = make_world(
        offerings=[offering("us-east-1a", price=40.0), offering("us-east-1b", price=40.0)],
        budgets=[{"name": "cap", "limit_usd": 1.0, "window": window}],
    )
    a = w.submit(name="a", gpus="V100:1")
    b = w.submit(name="b", gpus="V100:1")
    w.tick()
    states = sorted([w.job(a).state.value, w.job(b).state.value])
    assert states == ["PENDING", "RUNNING"]
    running, waiting = (a, b) if w.job(a).state is JobState.RUNNING else (b, a)
    assert "budget 'cap'" in w.job(waiting).reason
    cancel(w.rec.engine, running, w.clock.now())
    w.tick(n=3)
    assert w.job(waiting).state is JobState.RUNNING


def test_the_leak_sweep_lists_the_clouds_once_a_minute_not_every_pass(make_world, monkeypatch):
    from providers.base import LaunchRequest

    w = make_world(leak_grace="5m")
    calls: list[float] = []
    real = w.provider.list_tagged

    def counting(owner):
        calls.append(w.clock.now().timestamp())
        return real(owner)

    monkeypatch.setattr(w.provider, "list_tagged", counting)
    o = w.provider.offerings()[0]
    (leaked,) = w.provider.launch(LaunchRequest("stray", o, ["x"], {}, _ours(w, "x")))
    w.tick(n=12)  # one minute of 5 s passes
    assert len(calls) == 1
    w.tick()
    assert len(calls) == 2  # a minute after the first
    w.tick(300, n=2)  # past the grace: still collected
    assert w.provider.instances[leaked.id].end_reason is EndReason.TERMINATED
    assert w.events("leak_terminated")


def _running_at_step(make_world, step: int, total: int):  # type: ignore[no-untyped-def]
    """A job running with `step` of `total` in its progress.json, seen by a pass: the world,
    the job id, its running attempt and its checkpoint directory."""
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    ckpt = w.tmp / "ckpt" / jid
    ckpt.mkdir(parents=True, exist_ok=True)
    _progress(ckpt, step, total)
    w.tick(30)
    assert w.job(jid).progress_step == step
    (a,) = w.attempts(jid)
    return w, jid, a, ckpt


def _progress(ckpt, step: int, total: int, **more: object) -> None:  # type: ignore[no-untyped-def]
    import json

    (ckpt / "progress.json").write_text(json.dumps({"step": step, "total_steps": total, **more}))


def test_a_finished_job_shows_the_trainers_last_step_not_the_last_one_a_pass_saw(make_world):
    """The trainer's final steps and save land between two passes; the pass that sees the
    instance gone reads progress.json once more, so `status` says 240/240, not 237/240."""
    w, jid, a, ckpt = _running_at_step(make_world, 237, 240)
    _progress(ckpt, 240, 240, done=True)
    (ckpt / "DONE").write_text("")
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick(30)
    job = w.job(jid)
    assert job.state is JobState.SUCCEEDED
    assert (job.progress_step, job.total_steps) == (240, 240)


def test_an_interrupted_job_keeps_the_step_of_its_notice_checkpoint(make_world):
    w, jid, a, ckpt = _running_at_step(make_world, 100, 1000)
    _progress(ckpt, 131, 1000)  # saved on the notice
    w.provider.end(a.instance_id, EndReason.INTERRUPTED)
    w.tick(30)
    job = w.job(jid)
    assert job.recoveries == 1 and job.progress_step == 131


@pytest.mark.parametrize("error", ["store", "bug"])
@pytest.mark.slow
def test_an_unreadable_store_at_the_end_still_gives_the_job_its_next_state(
    make_world, monkeypatch, error
):
    from scheduler.daemon.checkpoints import StoreError

    w, jid, a, ckpt = _running_at_step(make_world, 7, 10)

    def unreadable(uri: str) -> None:
        raise StoreError("AccessDenied") if error == "store" else ValueError("not JSON")

    monkeypatch.setattr(w.rec.jobs.stores, "progress", unreadable)  # DONE still reads
    (ckpt / "DONE").write_text("")
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick()
    job = w.job(jid)
    assert job.state is JobState.SUCCEEDED and job.progress_step == 7


@pytest.mark.parametrize("policy", ["spotwise", "greedy", "uniform-progress"])
def test_a_deadline_job_keeps_its_spot_instance_when_the_pool_runs_out_of_capacity(
    make_world, policy
):
    """Capacity for new launches gone from the running attempt's pool is not a reclaim of
    the instance: the job keeps it (seen down, spotwise stopped it to wait for, or bridge
    to, the capacity it already had; seen on the local market in an 80-column trial)."""
    from tests.support.fakes import offering

    spot, od = (
        offering("us-east-1a", price=0.9),
        offering("us-east-1a", price=3.06, market="on-demand"),
    )
    w = make_world(
        offerings=[spot, od], policy={"deadline_policy": policy, "restart_overhead": "6m"}
    )
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick(n=2)
    (a,) = w.attempts(jid)
    assert a.market == "spot" and a.state is AttemptState.RUNNING
    w.provider.set_offerings([od])  # no spot capacity left in us-east-1a for new launches
    w.rec.poll_prices()
    ckpt = w.tmp / "ckpt" / jid
    ckpt.mkdir(parents=True, exist_ok=True)
    for half_hours in range(1, 5):  # the job progresses (else the cost guard ends the bet)
        progress = {"step": 50 * half_hours, "total_steps": 1000}
        (ckpt / "progress.json").write_text(json.dumps(progress))
        w.tick(1800)
    assert not w.events("policy_move")
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING and a.market == "spot"
