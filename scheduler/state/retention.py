"""Retention: history the daemon no longer needs is pruned, so a long-lived state directory
stays small and a pass never slows with age. Jobs and attempts are kept, with their costs
(money); the hourly spend buckets are kept `spend_retention` (budgets keep running totals,
so pruning them changes no budget)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from providers.base import Provider
from scheduler.core.config import DaemonSettings
from scheduler.core.states import JobState
from scheduler.state.models import Event, Job, PolicyState, PriceSample, SpendBucket

log = logging.getLogger("spotwise.retention")


def prune(
    engine: Engine, now: datetime, settings: DaemonSettings, providers: Mapping[str, Provider]
) -> dict[str, int]:
    """Delete events, price samples and spend buckets past their retention, the policy
    state of finished jobs that a newer job of the same shape supersedes, and ended local
    instances."""
    out: dict[str, int] = {}
    with engine.begin() as c:
        out["policy_states"] = c.execute(_superseded_policy_states()).rowcount
        out["events"] = c.execute(
            sa.delete(Event).where(Event.at < now - settings.event_retention)  # type: ignore[arg-type]
        ).rowcount
        out["prices"] = c.execute(
            sa.delete(PriceSample).where(PriceSample.observed_at < now - settings.price_retention)  # type: ignore[arg-type]
        ).rowcount
        out["spend_buckets"] = c.execute(
            sa.delete(SpendBucket).where(SpendBucket.hour < now - settings.spend_retention)  # type: ignore[arg-type]
        ).rowcount
    for name, provider in providers.items():
        prune_instances = getattr(provider, "prune", None)
        if callable(prune_instances):
            try:
                out[f"{name}_instances"] = int(prune_instances(settings.instance_retention))
            except Exception as e:  # retention must never take the daemon down
                log.warning("pruning %s instances failed: %s", name, e)
    if any(out.values()):
        log.info("retention: pruned %s", ", ".join(f"{v} {k}" for k, v in out.items() if v))
    return out


def _superseded_policy_states() -> sa.Delete:
    """A finished job's PolicyState only serves to warm the next job of its shape, which
    reads the newest row of that shape: every older row of a job that cannot run again is
    dead weight (one per deadline job ever run, otherwise)."""
    ps, newer = PolicyState.__table__, sa.alias(PolicyState.__table__, "newer")  # type: ignore[attr-defined]
    # FAILED jobs can be requeued (and resume with their own state): theirs is kept.
    done = [x.value for x in JobState if x.terminal and x is not JobState.FAILED]
    finished = sa.select(Job.id).where(  # type: ignore[call-overload]
        sa.type_coerce(Job.state, sa.String).in_(done)
    )
    superseded = sa.exists().where(
        newer.c.shape == ps.c.shape,
        sa.or_(
            newer.c.updated_at > ps.c.updated_at,
            sa.and_(newer.c.updated_at == ps.c.updated_at, newer.c.job_id > ps.c.job_id),
        ),
    )
    return sa.delete(ps).where(ps.c.job_id.in_(finished), superseded)
