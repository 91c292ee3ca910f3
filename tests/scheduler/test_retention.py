"""Retention prunes events and price history past their age; jobs and spend are kept."""

from __future__ import annotations

from datetime import timedelta

from sqlmodel import Session, select

from scheduler.config import DaemonSettings
from scheduler.db import open_db
from scheduler.models import Event, PriceSample
from scheduler.retention import prune
from tests.fakes import NOW


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
    assert out == {"events": 1, "prices": 1, "local_instances": 2}
    assert local.asked == [timedelta(days=7)]
    with Session(engine) as s:
        assert [e.message for e in s.exec(select(Event)).all()] == ["10"]
        assert len(s.exec(select(PriceSample)).all()) == 1
