"""`checkpoint_interval = "auto"`: keep a running job's interval where its pool deserves it.

At each pass, for a running attempt of an "auto" job, the interval is recomputed
(scheduler.core.checkpointing: Young/Daly) from the pool's hazard as this pass sees it
(the cloud's prior fused with observations, raised while an early signal stands) and the
save time the trainer measured (progress.json's `last_save_seconds`). When it moved by more
than CHANGE_SHARE from what the attempt was told, the daemon writes checkpoint_interval.json
to the job's store (store I/O, outside any transaction; rewriting the same value is
harmless), then records the new value on the attempt in a short transaction with an event.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

from providers.base import Market
from scheduler.core import checkpointing
from scheduler.core.config import Config
from scheduler.core.jobspec import JobSpec
from scheduler.core.states import AttemptState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import Db
from scheduler.daemon.controllers.job.snapshot import PassFacts
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, Job
from trainer import contract

log = logging.getLogger("spotwise.jobs")


def wanted(
    spec: JobSpec, a: Attempt, progress: dict[str, Any] | None, facts: PassFacts, prior: float
) -> float | None:
    """The interval (seconds) this attempt should checkpoint at now, None when the job does
    not checkpoint "auto" or the attempt does not run."""
    if not spec.auto_checkpoint or a.state is not AttemptState.RUNNING:
        return None
    save = (progress or {}).get("last_save_seconds")
    save_s = float(save) if isinstance(save, int | float) and save > 0 else 0.0
    rate = facts.rates.get(a.pool, prior) if a.market == Market.SPOT.value else 0.0
    return spec.interval_at(rate, save_s).total_seconds()


def follow(
    db: Db,
    stores: CheckpointStores,
    cfg: Config,
    job: Job,
    a: Attempt,
    progress: dict[str, Any] | None,
    facts: PassFacts,
    now: datetime,
) -> None:
    spec = facts.spec(job.spec_json)
    seconds = wanted(spec, a, progress, facts, cfg.policy.spot_interruption_prior)
    if seconds is None:
        return
    if not checkpointing.changed(a.checkpoint_interval_s, timedelta(seconds=seconds)):
        return
    doc = {"seconds": round(seconds, 1), "job_id": job.id, "attempt": a.number,
           "pool": a.pool, "written_at": contract.utc_now()}  # fmt: skip
    try:
        stores.write(job.checkpoint_uri, contract.CHECKPOINT_INTERVAL, json.dumps(doc) + "\n")
    except StoreError as e:  # the next pass tries again; the trainer keeps its interval
        log.warning("job %s: cannot write %s: %s", job.id, contract.CHECKPOINT_INTERVAL, e)
        return
    with db.write() as s:
        row = s.get(Attempt, a.id)
        if row is None or row.state is not AttemptState.RUNNING:
            return
        before = row.checkpoint_interval_s
        row.checkpoint_interval_s = seconds
        s.add(row)
        was = f"{before:.0f}s" if before else "none"
        emit(
            s,
            now,
            "checkpoint_interval",
            f"checkpoint every {seconds:.0f}s on {a.pool} (was {was}): Young/Daly on the "
            "pool's hazard and the measured save time",
            job_id=job.id,
            attempt_id=a.id,
        )
