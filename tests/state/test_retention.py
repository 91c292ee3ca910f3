"""Retention prunes events and price history past their age; jobs and spend are kept."""

from __future__ import annotations

from datetime import timedelta

from sqlmodel import Session, select

from scheduler.core.config import DaemonSettings
from scheduler.core.states import JobState
from scheduler.state.db import open_db
from scheduler.state.models import Event, Job, PolicyState, PriceSample
from scheduler.state.retention import prune
from tests.support.fakes import NOW


class Pruning:
    def __init__(self) -> None:
        self.asked: list[timedelta] = []

    def prune(self, older_than: timedelta) -> int:
        self.asked.append(older_than)
        return 2


def test_retention_prunes_history_not_money(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path}/db.sqlite")
    with Session(engine) as s:
        for days in (100, 10):
            at = NOW - timedelta(days=days)
            s.add(Event(at=at, kind="k", message=f"{days}"))
            s.add(
                PriceSample(
                    observed_at=at,
                    cloud="aws",
                    region="r",
                    zone="z",
                    instance_type="t",
                    market="spot",
                    price_per_hour=1.0,
                    pool="p",
                )
            )
        s.commit()
    settings = DaemonSettings(event_retention="90d", price_retention="30d", instance_retention="7d")
    local = Pruning()
    out = prune(engine, NOW, settings, {"local": local})  # type: ignore[dict-item]
    assert out == {
        "policy_states": 0,
        "events": 1,
        "prices": 1,
        "spend_buckets": 0,
        "local_instances": 2,
    }
    assert local.asked == [timedelta(days=7)]
    with Session(engine) as s:
        assert [e.message for e in s.exec(select(Event)).all()] == ["10"]
        assert len(s.exec(select(PriceSample)).all()) == 1


def test_retention_keeps_the_policy_state_a_new_job_would_warm_from(tmp_path):
    """Per shape, the newest state stays (the next job of that shape warms from it), and
    so does every unfinished job's; a finished job's older state goes."""
    engine = open_db(f"sqlite:///{tmp_path}/db.sqlite")
    rows = {  # job: (state, shape, age in hours)
        "j-old": (JobState.SUCCEEDED, "a", 3),
        "j-new": (JobState.SUCCEEDED, "a", 1),
        "j-failed": (JobState.FAILED, "a", 4),  # may be requeued: it resumes from its own
        "j-live": (JobState.RUNNING, "a", 5),
        "j-tie": (JobState.CANCELLED, "a", 1),  # same time as j-new: the id breaks the tie
        "j-alone": (JobState.SUCCEEDED, "b", 9),
    }
    with Session(engine) as s:
        for jid, (state, shape, hours) in rows.items():
            s.add(
                Job(
                    id=jid,
                    name=jid,
                    spec_json="{}",
                    state=state,
                    checkpoint_uri="file:///c",
                    created_at=NOW,
                    updated_at=NOW,
                )
            )
            s.add(
                PolicyState(
                    job_id=jid,
                    policy="spotwise",
                    shape=shape,
                    updated_at=NOW - timedelta(hours=hours),
                )
            )
        s.commit()
    out = prune(engine, NOW, DaemonSettings(), {})
    assert out["policy_states"] == 2
    with Session(engine) as s:
        kept = sorted(p.job_id for p in s.exec(select(PolicyState)).all())
    assert kept == ["j-alone", "j-failed", "j-live", "j-tie"]
    assert prune(engine, NOW, DaemonSettings(), {})["policy_states"] == 0
