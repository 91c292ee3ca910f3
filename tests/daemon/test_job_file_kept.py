"""What a job file says is kept after the launch: its price cap (a move when the price
passes it, and sent to the clouds that take one), its checkpoint interval (to the job and to
its deadline policy's hedge), a cloud that rejects it for its own limit (avoided for that
job), a provider removed while it runs there, and `requeue` while its instance stops."""

from __future__ import annotations

from datetime import timedelta

import pytest

from providers.base import LaunchRejected
from scheduler.core.errors import UserError
from scheduler.core.policy.base import Observation
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state.requeue import requeue
from tests.support.fakes import FakeProvider, offering

POOL = "aws/us-east-1a/p3.2xlarge/spot"


def test_a_price_above_the_jobs_cap_after_launch_moves_it(make_world):
    w = make_world(
        offerings=[
            offering("us-east-1a", price=0.9),
            offering("us-east-1a", price=3.06, market="on-demand"),
        ]
    )
    jid = w.submit(gpus="V100:1", max_price_per_hour=1.0, migrate="never")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING
    assert w.provider.last_request.max_price_per_hour == 1.0  # the cap goes to the cloud
    w.provider.set_offerings(
        [
            offering("us-east-1a", price=2.5),
            offering("us-east-1a", price=3.06, market="on-demand"),
        ]
    )
    w.rec.poll_prices()
    w.tick(n=3)
    (a,) = w.attempts(jid)
    assert a.stop_reason == "price" and a.end_reason is AttemptEnd.MIGRATED
    (moved,) = w.events("price_move")
    assert "$2.50/h is above the job's max_price_per_hour $1.00" in moved.message
    job = w.job(jid)
    assert job.state is JobState.PENDING and "under $1/h" in job.reason  # nothing under it


def test_the_checkpoint_interval_reaches_the_job_and_the_deadline_hedge(make_world, monkeypatch):
    import scheduler.core.deadline as deadline

    seen: list[Observation] = []
    original = deadline.get_policy

    def recording(name):  # type: ignore[no-untyped-def]
        policy = original(name)
        observe = policy.observe

        def keep(obs: Observation) -> None:
            seen.append(obs)
            observe(obs)

        policy.observe = keep  # type: ignore[method-assign]
        return policy

    monkeypatch.setattr(deadline, "get_policy", recording)
    w = make_world(policy={"deadline_policy": "spotwise"})
    w.submit(gpus="V100:1", gpu_hours=10, deadline="30h", checkpoint_interval="15m")
    w.tick(n=3)
    assert w.provider.last_request.env["SPOTWISE_CHECKPOINT_INTERVAL"] == "900"
    assert seen and all(o.checkpoint_interval == pytest.approx(0.25) for o in seen)
    running = [o for o in seen if o.placement is not None]
    assert running and running[-1].work_at_risk > 0  # a running attempt has work at risk


def test_the_trainer_honours_the_jobs_checkpoint_interval(monkeypatch):
    from trainer.config import ENV_CHECKPOINT_INTERVAL, ConfigError, parse_args

    assert parse_args([]).checkpoint.interval_seconds == 0  # no scheduler: disabled
    monkeypatch.setenv(ENV_CHECKPOINT_INTERVAL, "900")
    assert parse_args([]).checkpoint.interval_seconds == 900
    flags = ["--checkpoint.interval_seconds", "60"]
    assert parse_args(flags).checkpoint.interval_seconds == 60  # its own config wins
    monkeypatch.setenv(ENV_CHECKPOINT_INTERVAL, "soon")
    with pytest.raises(ConfigError, match=ENV_CHECKPOINT_INTERVAL):
        parse_args([])


def test_a_cloud_that_rejects_a_job_for_its_own_limit_is_avoided_for_that_job(make_world):
    """EC2 refuses user data over 16 KB; another cloud takes it: the job goes there after
    one rejection, instead of failing after max_attempts on the cheapest cloud."""
    cheap = FakeProvider([offering("us-east-1a", price=0.9)], name="aws")
    dear = FakeProvider([offering("us-central1-a", price=1.4, cloud="gcp")], name="gcp")
    w = make_world(provider=cheap, max_attempts=3)
    dear.clock = w.clock
    w.rec.providers = {"aws": cheap, "gcp": dear}
    w.rec.poll_prices()
    cheap.fail_launch[POOL] = LaunchRejected("aws: user data is 17 KB; EC2 takes 16 KB")
    jid = w.submit(gpus="V100:1")
    other = w.submit(name="small", gpus="V100:1")
    w.tick(n=3)
    ends = [(a.provider, a.end_reason) for a in w.attempts(jid)]
    assert ends[0] == ("aws", AttemptEnd.REJECTED)
    assert w.attempts(jid)[-1].provider == "gcp" and w.job(jid).state is JobState.RUNNING
    assert len(ends) == 2  # one rejection, then the other cloud
    # Another job is not avoided from aws for this job's rejection.
    cheap.fail_launch.clear()
    assert w.attempts(other)[0].end_reason is AttemptEnd.REJECTED  # same request, same limit
    third = w.submit(name="third", gpus="V100:1")
    w.tick()
    assert w.attempts(third)[0].provider == "aws"


def test_a_job_every_adequate_cloud_rejected_fails_naming_each(make_world):
    a = FakeProvider([offering("us-east-1a", price=0.9)], name="aws")
    b = FakeProvider([offering("us-central1-a", price=1.4, cloud="gcp")], name="gcp")
    w = make_world(provider=a, max_attempts=5)
    b.clock = w.clock
    w.rec.providers = {"aws": a, "gcp": b}
    w.rec.poll_prices()
    a.fail_launch[POOL] = LaunchRejected("aws: user data is 17 KB; EC2 takes 16 KB")
    b.fail_launch["gcp/us-central1-a/p3.2xlarge/spot"] = LaunchRejected("gcp: bad label")
    jid = w.submit(gpus="V100:1")
    w.tick(n=4)
    job = w.job(jid)
    assert job.state is JobState.FAILED
    assert "every adequate provider rejected" in job.reason
    assert "EC2 takes 16 KB" in job.reason and "bad label" in job.reason
    assert len(w.attempts(jid)) == 2  # not max_attempts tries on the cheapest


def test_requeue_of_a_quarantined_job_whose_instance_still_stops_is_refused(
    make_world, monkeypatch
):
    w = make_world(quarantine_after=2, backoff_base="1s", backoff_max="1s")
    w.provider.terminate_delay = timedelta(minutes=10)
    jid = w.submit(gpus="V100:1")
    w.tick()
    real = w.rec.jobs._step_job

    def failing(job, *args, **kw):  # type: ignore[no-untyped-def]
        if job.id == jid:
            raise RuntimeError("injected")
        return real(job, *args, **kw)

    monkeypatch.setattr(w.rec.jobs, "_step_job", failing)
    w.tick(n=3)
    assert w.job(jid).state is JobState.FAILED
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.STOPPING  # its instance takes minutes to stop
    with pytest.raises(UserError, match=r"still stopping.*requeue it once it has ended"):
        requeue(w.rec.engine, jid, w.clock.now())
    monkeypatch.undo()
    w.tick(600 + 5, n=2)
    assert w.attempts(jid)[0].state is AttemptState.ENDED
    assert requeue(w.rec.engine, jid, w.clock.now()).state is JobState.PENDING
    w.tick(n=2)
    assert w.job(jid).state is JobState.RUNNING  # and it stays requeued


def test_the_deadline_work_estimate_uses_the_alternative_the_job_runs_on(make_world):
    """gpus = ["V100:1", "V100:4"], 8 GPU-hours: on the 4-GPU machine it is 2 h of work."""
    from scheduler.daemon.controllers.job.deadline_advice import deadline_job

    w = make_world(offerings=[offering("us-east-1a", itype="p3.8xlarge", count=4, price=3.6)])
    jid = w.submit(gpus=["V100:1", "V100:4"], gpu_hours=8, deadline="30h")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.gpu_count == 4
    from scheduler.core.jobspec import load_stored

    job = w.job(jid)
    dj = deadline_job(job, load_stored(job.spec_json), w.clock.now(), a)
    assert dj.work_hours == pytest.approx(2.0)


def test_a_finished_jobs_deadline_policy_is_forgotten(make_world):
    from providers.base import EndReason

    w = make_world(policy={"deadline_policy": "greedy"})
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick(n=2)
    assert w.rec.planner.knows(jid)
    (a,) = w.attempts(jid)
    w.provider.end(a.instance_id, EndReason.EXITED, exit_code=0)
    w.tick()
    assert w.job(jid).state is JobState.SUCCEEDED
    assert not w.rec.planner.knows(jid)


GCP = (
    '[providers.gcp]\nproject = "p"\ncredentials = "anonymous"\n'
    'api_endpoint = "http://127.0.0.1:9"\nbilling_endpoint = "http://127.0.0.1:9"\n'
)


def _aws(enabled: bool) -> str:
    return (
        '[providers.aws]\nregions = ["us-east-1"]\nendpoint_url = "http://127.0.0.1:9"\n'
        'pricing_endpoint_url = "http://127.0.0.1:9"\nami = "ami-0123456789abcdef0"\n'
        f"enabled = {str(enabled).lower()}\n"
    )


def test_a_provider_disabled_or_removed_while_jobs_run_on_it(tmp_path, caplog):
    """`enabled = false` on a reload keeps the cloud observe-only (its instances are still
    watched, stopped and billed; nothing new goes there); removing its section while an
    attempt runs there is refused, keeping the running config."""
    import logging

    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon
    from scheduler.state.models import Attempt, Job

    cfg = tmp_path / "spotwise.toml"
    head = f'[daemon]\nstate_dir = "{tmp_path}"\n'
    cfg.write_text(head + _aws(True) + GCP)
    daemon = Daemon(cfg, clock=SimClock())
    daemon.lock.release()
    from sqlmodel import Session

    now = daemon.clock.now()
    with Session(daemon.engine) as s:  # a job running on aws
        s.add(
            Job(
                id="j-1", name="x", spec_json="{}", checkpoint_uri="file:///x",
                created_at=now, updated_at=now,
            )
        )  # fmt: skip
        s.flush()
        s.add(
            Attempt(
                id="j-1-a1", job_id="j-1", number=1, token="t", provider="aws", cloud="aws",
                region="us-east-1", zone="us-east-1a", instance_type="g5.xlarge",
                market="spot", pool="aws/us-east-1a/g5.xlarge/spot", price_per_hour=1.0,
                state=AttemptState.RUNNING, instance_id="i-0123456789abcdef0",
                created_at=now,
            )
        )  # fmt: skip
        s.commit()
    cfg.write_text(head + _aws(False) + GCP)
    daemon.reload()
    assert "aws" in daemon.reconciler.providers  # still watched, stopped and billed
    assert daemon.reconciler.observe_only == {"aws"}  # but nothing new goes there
    cfg.write_text(head + GCP)  # aws removed, gcp added
    with caplog.at_level(logging.ERROR, logger="spotwise.daemon"):
        daemon.reload()
    assert "aws" in daemon.reconciler.providers and daemon.config.providers.aws is not None
    (refused,) = [r.getMessage() for r in caplog.records if "reload rejected" in r.getMessage()]
    assert "provider aws still runs 1 attempt(s) (j-1-a1)" in refused


def test_an_observe_only_provider_places_nothing_new_and_still_stops_what_runs(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick(n=2)
    w.rec.observe_only = frozenset({"fake"})  # as a reload with enabled = false does
    w.rec.poll_prices()
    later = w.submit(name="later", gpus="V100:1")
    w.tick(3600)
    assert w.job(later).state is JobState.PENDING and not w.attempts(later)
    assert w.attempts(jid)[0].cost_usd > 0.85  # billed all along
    from scheduler.state.desired import cancel

    cancel(w.rec.engine, jid, w.clock.now())
    w.tick(n=3)
    assert w.attempts(jid)[0].end_reason is AttemptEnd.CANCELLED
    assert not w.provider.running()
