"""Two deployments in one cloud account (staging and production, two teams), both with the
default owner tag, never touch each other's instances: leak collection acts only on
resources it can prove are its own (its install id, a job it knows), and reports the rest."""

from __future__ import annotations

from sqlmodel import Session, select

from providers.base import TAG_ATTEMPT, TAG_JOB, TAG_OWNER, EndReason, LaunchRequest
from scheduler.core.clock import SimClock
from scheduler.core.config import Config, DaemonSettings
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.states import JobState
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.desired import submit
from scheduler.state.models import Event, Job
from tests.support.fakes import NOW, FakeProvider, offering


def _deployment(tmp, name: str, cloud: FakeProvider, clock: SimClock) -> Reconciler:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp}/{name}.db"
    cfg = Config(daemon=DaemonSettings(database_url=url, leak_grace="2m", state_dir=tmp / name))
    rec = Reconciler(open_db(url), cfg, {"fake": cloud}, clock)
    rec.poll_prices()
    return rec


def _submit(rec: Reconciler, clock: SimClock, tmp, name: str) -> str:  # type: ignore[no-untyped-def]
    spec = jobspec_from_dict({"name": name, "command": ["train"], "gpus": "V100:1"})
    return submit(rec.engine, spec, clock.now(), (tmp / "ckpt").as_uri()).id


def _events(rec: Reconciler, kind: str) -> list[Event]:
    with Session(rec.engine) as s:
        return list(s.exec(select(Event).where(Event.kind == kind)).all())


def test_two_daemons_with_two_databases_never_collect_each_others_instances(tmp_path):
    clock = SimClock(NOW)
    cloud = FakeProvider([offering("us-east-1a", price=0.9)])
    cloud.clock = clock
    staging = _deployment(tmp_path, "staging", cloud, clock)
    production = _deployment(tmp_path, "production", cloud, clock)
    s_job = _submit(staging, clock, tmp_path, "staging-job")
    p_job = _submit(production, clock, tmp_path, "production-job")
    for _ in range(60):  # 10 minutes: five leak graces, a sweep every 30 s
        clock.advance(10)
        for rec in (staging, production):
            rec.reconcile()
            rec.accrue()
    running = cloud.running()
    assert len(running) == 2 and cloud.terminate_calls == 0
    for rec, jid in ((staging, s_job), (production, p_job)):
        with Session(rec.engine) as s:
            assert s.get(Job, jid).state is JobState.RUNNING
        assert not _events(rec, "leak_terminated")
        (reported,) = _events(rec, "leak_not_ours")  # said once, not every sweep
        assert "another installation" in reported.message
    tags = {i.tags[TAG_JOB]: i.tags for i in running}
    assert tags[s_job]["spotwise-install"] != tags[p_job]["spotwise-install"]


def test_only_resources_proven_ours_are_collected(make_world):
    """Ours: our install id and a job of this database. A resource naming a job this
    database never had, or with our owner tag and nothing else, is reported, not touched."""
    w = make_world(leak_grace="2m")
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    mine = w.provider.instances[a.instance_id].tags
    o = w.provider.offerings()[0]

    def stray(token: str, tags: dict[str, str]) -> str:
        (inst,) = w.provider.launch(LaunchRequest(token, o, ["x"], {}, tags))
        return inst.id

    # A second instance a crash left behind for this job's attempt: ours, a leak.
    leaked = stray("left-behind", {**mine, TAG_ATTEMPT: f"{jid}-a9"})
    # Our install id, a job this database does not know: reported.
    unknown = stray("unknown-job", {**mine, TAG_JOB: "j-notours00000", TAG_ATTEMPT: "j-x-a1"})
    # The owner tag and nothing else (made by hand, or by another tool): reported.
    bare = stray("bare", {TAG_OWNER: "spotwise", TAG_ATTEMPT: "gone"})
    w.tick(n=2)
    w.tick(200, n=2)
    assert w.provider.instances[leaked].end_reason is EndReason.TERMINATED
    assert w.provider.instances[unknown].state.value == "running"
    assert w.provider.instances[bare].state.value == "running"
    assert w.provider.instances[a.instance_id].state.value == "running"
    said = {e.message.split()[1]: e.message for e in w.events("leak_not_ours")}
    assert set(said) == {unknown, bare}
    assert "j-notours00000" in said[unknown] and "unknown to this database" in said[unknown]
    (done,) = w.events("leak_terminated")
    assert leaked in done.message and done.job_id == jid


def test_a_leak_of_ours_is_billed_to_the_attempt_its_tags_name_and_its_budgets(make_world):
    """A second instance under a job's attempt (a launch that landed after the attempt was
    settled) is terminated after leak_grace and what it ran is billed to that attempt, so
    the job's cost and its budgets count it, not only the instance the attempt recorded."""
    w = make_world(leak_grace="2m", budgets=[{"name": "all", "limit_usd": 100.0}])
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    o = w.provider.offerings()[0]
    tags = w.provider.instances[a.instance_id].tags
    (extra,) = w.provider.launch(LaunchRequest("landed-late", o, ["x"], {}, tags))
    launched = w.clock.now()
    w.tick(n=2)
    w.tick(200, n=2)
    assert w.provider.instances[extra.id].end_reason is EndReason.TERMINATED
    (done,) = w.events("leak_terminated")
    assert f"to {a.id}" in done.message and "billed $" in done.message
    ran_h = (w.provider.instances[extra.id].ended_at - launched).total_seconds() / 3600
    own_h = (w.clock.now() - w.attempts(jid)[0].started_at).total_seconds() / 3600
    w.rec.accrue()
    cost = w.attempts(jid)[0].cost_usd
    assert abs(cost - 0.9 * (own_h + ran_h)) < 0.01, (cost, own_h, ran_h)
    assert w.job(jid).cost_usd == cost
    with w.rec.db.read() as s:
        (budget,) = w.rec.spend.statuses(s, w.clock.now())
    assert abs(budget.spent - cost) < 1e-6
