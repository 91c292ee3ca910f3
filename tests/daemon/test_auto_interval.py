"""checkpoint_interval = "auto" in the daemon: Young/Daly from the pool's hazard and the
trainer's save time, passed at launch and rewritten in the store as the hazard moves."""

from __future__ import annotations

import json

import pytest

from scheduler.core.checkpointing import MAX_INTERVAL, MIN_INTERVAL, changed, young_daly
from tests.support.fakes import offering
from trainer import contract


def test_young_daly_grows_with_the_time_between_interruptions_and_the_save_time():
    # sqrt(2 x 30 s x 36,000 s) = 1,470 s, about 25 minutes.
    assert young_daly(30, 0.1).total_seconds() == pytest.approx(1469.7, abs=0.1)
    assert young_daly(30, 0.4) < young_daly(30, 0.1) < young_daly(120, 0.1)
    assert young_daly(30, 0.0) == MAX_INTERVAL  # on-demand: no interruptions to hedge
    assert young_daly(0.01, 100.0) == MIN_INTERVAL
    assert changed(None, young_daly(30, 0.1)) and not changed(1470, young_daly(30, 0.11))


def test_the_interval_is_passed_at_launch_and_follows_the_hazard(make_world):
    w = make_world(offerings=[offering("us-east-1a", price=1.0), offering("us-east-1b", price=3.0)])
    jid = w.submit(gpus="V100:1", checkpoint_interval="auto")
    w.tick()
    req = w.provider.last_request
    first = float(req.env[contract.ENV_CHECKPOINT_INTERVAL])
    assert first == pytest.approx(young_daly(30, 0.1).total_seconds(), rel=0.01)
    (a,) = w.attempts(jid)
    assert a.checkpoint_interval_s == pytest.approx(first, abs=1)
    ckpt = w.tmp / "ckpt" / jid
    ckpt.mkdir(parents=True, exist_ok=True)
    # The trainer measured a 2-minute save: the interval doubles, the store says so.
    (ckpt / "progress.json").write_text(json.dumps({"step": 3, "last_save_seconds": 120.0}))
    w.tick(30)
    doc = json.loads((ckpt / contract.CHECKPOINT_INTERVAL).read_text())
    assert doc["job_id"] == jid and doc["attempt"] == 1
    assert doc["seconds"] == pytest.approx(young_daly(120, 0.1).total_seconds(), rel=0.01)
    # A rebalance recommendation raises the pool's hazard: checkpoint more often.
    w.provider.early_signal(a.instance_id)
    w.tick(30)
    raised = json.loads((ckpt / contract.CHECKPOINT_INTERVAL).read_text())["seconds"]
    assert raised < doc["seconds"] * 0.8
    assert len(w.events("checkpoint_interval")) == 2
    w.tick(30, n=3)
    assert len(w.events("checkpoint_interval")) == 2  # unchanged: not written again


def test_a_fixed_interval_is_passed_and_writes_nothing(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1", checkpoint_interval="15m")
    w.tick()
    assert w.provider.last_request.env[contract.ENV_CHECKPOINT_INTERVAL] == "900"
    w.tick(30)
    assert not (w.tmp / "ckpt" / jid / contract.CHECKPOINT_INTERVAL).exists()
