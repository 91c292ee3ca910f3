"""What a pass over the jobs reads before it decides anything, read once for every job.

`PassFacts` is what every job's decision shares (pool states, interruption rates, budget
statuses, the catalog) plus per-pass memos of the pure placement work jobs with the same
requirements share; `Snapshot` is the jobs the pass steps with their live and last
attempts, read in a few queries per chunk of ids, none per job; and, once the database is
let go, every progress.json the pass needs, read as one concurrent batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from providers.base import Market
from scheduler.core import budget as budgets
from scheduler.core import early_signals
from scheduler.core.catalog import Catalog
from scheduler.core.config import Config
from scheduler.core.hazard import AVOID_CAP_HOURS, avoid_hours, fused_rate
from scheduler.core.hazard import PRIOR_HOURS as hazard_prior_hours
from scheduler.core.jobspec import JobSpec, StoredSpecInvalid, load_stored
from scheduler.core.placement import (
    DEFAULT_SPOT_INTERRUPTION_RATE,
    Candidates,
    Decision,
    PlacementContext,
    Requirements,
    place,
    rate_column,
)
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.daemon.checkpoints import ProgressReads
from scheduler.daemon.controllers.base import (
    ACTIVE_JOB_STATES,
    LIVE,
    CatalogHolder,
    hours,
    later,
)
from scheduler.daemon.controllers.rows import CHUNK
from scheduler.daemon.controllers.spend import SpendController
from scheduler.state.models import Attempt, Job, PoolState

PRIOR_HOURS = hazard_prior_hours  # weight of the interruption prior, in observed hours


@dataclass
class PassFacts:
    """What every job's decision in one pass shares, read once per pass, plus per-pass memos
    of the pure computations jobs with the same requirements share."""

    now: datetime
    unavailable: dict[str, datetime]
    rates: dict[str, float]
    rate_by_row: np.ndarray
    statuses: list[budgets.BudgetStatus]
    hold_hours: float
    # pool -> (instances it held, why): gangs larger than that skip it (PoolState).
    gang_capacity: dict[str, tuple[int, str]] = field(default_factory=dict)
    catalog: Catalog = field(default_factory=Catalog.empty)
    # job id -> pools it was interrupted in recently (it should not return there yet)
    avoid: dict[str, frozenset[str]] = field(default_factory=dict)
    # job id -> provider -> why that provider rejected the job's request (avoided for it)
    rejected: dict[str, dict[str, str]] = field(default_factory=dict)
    provider_of_pool: Mapping[str, str] = field(default_factory=dict)
    _provider_pools: dict[str, frozenset[str]] = field(default_factory=dict)
    # pool -> hours a job stays away after an interruption there, learned from the pool's
    # outages (hazard.avoid_hours); pools not listed use [daemon] avoid_after_interrupt
    avoid_hours: dict[str, float] = field(default_factory=dict)
    # job id -> when each of its recent attempts was interrupted (fallback_after counts them)
    interrupted_at: dict[str, list[datetime]] = field(default_factory=dict)
    memo: Candidates | None = None
    _requirements: dict[tuple[object, ...], Requirements] = field(default_factory=dict)
    _specs: dict[str, JobSpec | StoredSpecInvalid] = field(default_factory=dict)
    _pool_rows: dict[str, np.ndarray] = field(default_factory=dict)
    _alternatives: dict[tuple[object, ...], tuple[Decision, Decision]] = field(default_factory=dict)

    def spec(self, spec_json: str) -> JobSpec:
        """The parsed spec, once per distinct JSON in a pass (jobs are often submitted many
        from one spec); treated as read-only. StoredSpecInvalid when it no longer
        validates (`spec_problem` asks first)."""
        spec = self._specs.get(spec_json)
        if spec is None:
            try:
                spec = load_stored(spec_json)
            except StoredSpecInvalid as e:
                spec = e
            self._specs[spec_json] = spec
        if isinstance(spec, StoredSpecInvalid):
            raise spec
        return spec

    def spec_problem(self, spec_json: str) -> str | None:
        """Why a job's stored spec no longer validates (one line), None when it does."""
        try:
            self.spec(spec_json)
        except StoredSpecInvalid as e:
            return str(e)
        return None

    def requirements(self, spec: JobSpec) -> Requirements:
        key = Requirements.key_of(spec)
        req = self._requirements.get(key)
        if req is None:
            req = self._requirements[key] = Requirements.from_spec(spec)
        return req

    def pool_rows(self, pool: str) -> np.ndarray:
        rows = self._pool_rows.get(pool)
        if rows is None:
            cat = self.catalog
            code = cat.pools.index.get(pool)
            rows = np.flatnonzero(cat.pool == code) if code is not None else np.empty(0, np.intp)
            self._pool_rows[pool] = rows
        return rows

    def alternatives(self, req: Requirements, ctx: PlacementContext) -> tuple[Decision, Decision]:
        """The best offering and the best on-demand one under `ctx` (a budget-free, per-hour
        context: it depends on the job only through these fields)."""
        key = (req, ctx.avoid_pools, ctx.lost_work_hours, ctx.restart_overhead_hours)
        hit = self._alternatives.get(key)
        if hit is None:
            best = place(req, self.catalog, ctx, self.memo)
            od_ctx = replace(ctx, markets=frozenset({Market.ON_DEMAND}))
            od = place(req, self.catalog, od_ctx, self.memo)
            hit = self._alternatives[key] = (best, od)
        return hit

    def rejected_pools(self, job_id: str) -> frozenset[str]:
        """Every pool of the providers that rejected this job's request."""
        rejected = self.rejected.get(job_id)
        if not rejected:
            return frozenset()
        if not self._provider_pools:
            by: dict[str, set[str]] = {}
            for pool, name in self.provider_of_pool.items():
                by.setdefault(name, set()).add(pool)
            self._provider_pools = {n: frozenset(p) for n, p in by.items()}
        out: frozenset[str] = frozenset()
        for name in rejected:
            out |= self._provider_pools.get(name, frozenset())
        return out

    def placement_context(
        self,
        job: Job,
        spec: JobSpec,
        now: datetime,
        restart_overhead: timedelta,
        with_budget: bool = True,
    ) -> PlacementContext:
        """What placement weighs for `job` in this pass: the pass's pools and rates, the
        budget headroom left to it (unless `with_budget` is False), and the work it has left
        by its trainer's progress."""
        affordable, budget_name = None, ""
        if with_budget:
            affordable, budget_name = budgets.max_affordable_price(
                self.statuses, job.name, job.team, self.hold_hours, user=job.submitted_by
            )
        remaining = spec.gpu_hours
        if remaining and job.total_steps and job.progress_step:
            remaining = spec.gpu_hours * max(0.0, 1 - job.progress_step / job.total_steps)  # type: ignore[operator]
        return PlacementContext(
            now=now,
            unavailable=self.unavailable,
            avoid_pools=self.avoid.get(job.id, frozenset()) | self.rejected_pools(job.id),
            max_affordable_price=affordable,
            budget_name=budget_name,
            remaining_gpu_hours=remaining or None,
            interruption_rate=self.rates,
            rate_by_row=self.rate_by_row,
            restart_overhead_hours=hours(restart_overhead),
            lost_work_hours=hours(spec.interval_at(DEFAULT_SPOT_INTERRUPTION_RATE)) / 2,
            gang_capacity=self.gang_capacity,
        )


@dataclass
class Snapshot:
    """The jobs a pass steps and their attempts, read in a few queries, and the progress
    the pass read for them from their checkpoint stores."""

    jobs: list[Job]
    live: dict[str, Attempt]  # job id -> its newest live attempt
    last: dict[str, Attempt]  # job id -> its highest-numbered attempt
    # job id -> how many live attempts it has (two while one is placed beside a noticed one)
    live_count: dict[str, int] = field(default_factory=dict)
    # job id -> the attempt its newest live attempt was placed beside (`Attempt.replaces`)
    replaced: dict[str, Attempt] = field(default_factory=dict)
    # job ids whose next state this pass wrote in a batch, before the per-job steps
    next_state_written: set[str] = field(default_factory=set)
    progress: ProgressReads = field(default_factory=ProgressReads)

    def ended(self) -> list[tuple[Job, Attempt]]:
        """Jobs with no live attempt whose last attempt ended and whose next state is not
        written yet, with that attempt."""
        return [
            (job, last)
            for job in self.jobs
            if job.id not in self.live
            and (last := self.last.get(job.id)) is not None
            and last.end_reason is not None
            and job.settled_attempt != last.id
        ]

    def progress_to_read(self) -> dict[str, str]:
        """job id -> checkpoint URI of every job whose progress.json this pass reads: each
        running attempt's (the job's step, for `status` and its deadline policy), and each
        just-ended attempt's once more (the trainer's last steps and its final save land
        between two passes), unless the job is already at its last step."""
        uris = {
            job.id: job.checkpoint_uri
            for job in self.jobs
            if (a := self.live.get(job.id)) is not None and a.state is AttemptState.RUNNING
        }
        for job, _ in self.ended():
            if not (job.total_steps and job.progress_step == job.total_steps):
                uris[job.id] = job.checkpoint_uri
        return uris


def read_facts(
    s: Session, now: datetime, cfg: Config, catalog: CatalogHolder, spend: SpendController
) -> PassFacts:
    """The pass's shared facts: pool states, interruption rates and budget statuses."""
    prior = cfg.policy.spot_interruption_prior
    unavailable: dict[str, datetime] = {}
    rates: dict[str, float] = {}
    learned_avoid: dict[str, list[float]] = {}
    snap = catalog.current  # one snapshot for the whole pass, even if prices swap
    # What the provider can launch at once, narrowed by what a pool was seen to hold.
    gang_capacity: dict[str, tuple[int, str]] = dict(snap.request_limit)
    for p in s.exec(select(PoolState)).all():
        if p.gang_capacity is not None and later(p.gang_capacity_until, now):
            limit = gang_capacity.get(p.pool)
            if limit is None or p.gang_capacity < limit[0]:
                gang_capacity[p.pool] = (p.gang_capacity, p.gang_capacity_reason)
        if p.unavailable_until is not None and p.unavailable_until > now:
            unavailable[p.pool] = p.unavailable_until
        if p.outage_hours and p.outage_hours != "[]":
            learned_avoid[p.pool] = _outages(p.outage_hours)
        if p.interruptions or p.exposure_hours or p.prior_rate is not None:
            # the cloud's own risk data where it gave any, else the configured prior,
            # updated with what the daemon observed in the pool
            start = prior if p.prior_rate is None else p.prior_rate
            rates[p.pool] = fused_rate(start, p.interruptions, p.exposure_hours, PRIOR_HOURS)
    # A pool where an instance got an early signal lately is riskier for everyone, whether
    # that instance is still there or the job moved (`early_signal_at` is indexed).
    raised = signal_hazard(cfg.policy.early_signal_probability)
    since = now - timedelta(hours=early_signals.SIGNAL_HORIZON_HOURS)
    for pool in s.exec(
        select(Attempt.pool).where(col(Attempt.early_signal_at) > since).distinct()
    ).all():
        rates[pool] = max(rates.get(pool, prior), raised)
    cat = snap.catalog
    default_avoid = hours(cfg.daemon.avoid_after_interrupt)
    return PassFacts(
        avoid_hours={p: avoid_hours(o, default_avoid) for p, o in learned_avoid.items()},
        now=now,
        unavailable=unavailable,
        rates=rates,
        rate_by_row=rate_column(cat, rates, prior),
        statuses=spend.statuses(s, now),
        hold_hours=spend.hold_hours(),
        gang_capacity=gang_capacity,
        catalog=cat,
        memo=Candidates(cat),
        provider_of_pool=snap.provider_of_pool,
    )


def _fallback_hours(facts: PassFacts, job: Job) -> float:
    """How far back `fallback_after` counts for this job (0 without it, or with a spec this
    version cannot read: its own step reports that, the pass goes on)."""
    try:
        spec = facts.spec(job.spec_json)
    except ValueError:
        return 0.0
    return hours(spec.fallback_window) if spec.fallback_after is not None else 0.0


def _outages(text: str) -> list[float]:
    try:
        return [float(h) for h in json.loads(text)]
    except (TypeError, ValueError):
        return []


def signal_hazard(probability: float) -> float:
    """The hazard per hour that gives `probability` of an interruption over the signal's
    horizon (scheduler.core.early_signals)."""
    p = min(max(probability, 0.0), 0.999)
    return -math.log(1.0 - p) / early_signals.SIGNAL_HORIZON_HOURS


def _active(chunk: list[str] | None) -> sa.ColumnElement[bool]:
    active: sa.ColumnElement[bool] = col(Job.state).in_(ACTIVE_JOB_STATES)
    return active if chunk is None else sa.and_(active, col(Job.id).in_(chunk))


def _chunks(only: list[str] | None) -> list[list[str] | None]:
    return [None] if only is None else [only[i : i + CHUNK] for i in range(0, len(only), CHUNK)]


def read_active_jobs(s: Session, only: list[str] | None) -> list[Job]:
    """Every active job (or those of `only`), oldest first."""
    jobs: list[Job] = []
    chunks = _chunks(only)
    for chunk in chunks:
        q = select(Job).where(_active(chunk)).order_by(col(Job.created_at))
        jobs.extend(s.exec(q).all())
    if len(chunks) > 1:
        jobs.sort(key=lambda j: j.created_at)
    return jobs


def read_snapshot(
    s: Session,
    jobs: list[Job],
    only: list[str] | None,
    facts: PassFacts,
    avoid_after_interrupt: timedelta,
) -> Snapshot:
    """The jobs' live and last attempts, the pools each was recently interrupted in (for
    as long as that pool's learned avoid time, else `avoid_after_interrupt`), and when its
    recent interruptions were (for `fallback_after`): three queries per chunk of ids, none
    per job."""
    default = hours(avoid_after_interrupt)
    lookback = max([default, AVOID_CAP_HOURS] + [_fallback_hours(facts, j) for j in jobs])
    recent = facts.now - timedelta(hours=lookback)
    interrupted_at: dict[str, list[datetime]] = {}
    joined = col(Attempt.job_id) == col(Job.id)
    live: dict[str, Attempt] = {}
    live_count: dict[str, int] = {}
    last: dict[str, Attempt] = {}
    avoid: dict[str, set[str]] = {}
    rejected: dict[str, dict[str, str]] = {}
    for chunk in _chunks(only):
        active = _active(chunk)
        for a in s.exec(
            select(Attempt).join(Job, joined).where(active, col(Attempt.state).in_(LIVE))
        ).all():
            seen = live.get(a.job_id)
            if seen is None or a.number > seen.number:
                live[a.job_id] = a
            live_count[a.job_id] = live_count.get(a.job_id, 0) + 1
        top = (
            select(col(Attempt.job_id).label("job_id"), func.max(Attempt.number).label("n"))
            .join(Job, joined)
            .where(active)
            .group_by(col(Attempt.job_id))
            .subquery()
        )
        for a in s.exec(
            select(Attempt).join(
                top,
                sa.and_(col(Attempt.job_id) == top.c.job_id, col(Attempt.number) == top.c.n),
            )
        ).all():
            last[a.job_id] = a
        for job_id, pool, ended_at, end_reason in s.exec(
            select(Attempt.job_id, Attempt.pool, Attempt.ended_at, Attempt.end_reason)
            .join(Job, joined)
            .where(
                active,
                sa.or_(
                    col(Attempt.end_reason) == AttemptEnd.INTERRUPTED,
                    col(Attempt.stop_reason) == "rebalance",  # it left on an early signal
                ),
                col(Attempt.ended_at) > recent,
            )
        ).all():
            assert ended_at is not None
            if end_reason is AttemptEnd.INTERRUPTED:
                interrupted_at.setdefault(job_id, []).append(ended_at)
            if ended_at > facts.now - timedelta(hours=facts.avoid_hours.get(pool, default)):
                avoid.setdefault(job_id, set()).add(pool)
        for job_id, provider, detail in s.exec(
            select(Attempt.job_id, Attempt.provider, Attempt.detail)
            .join(Job, joined)
            .where(active, Attempt.end_reason == AttemptEnd.REJECTED)
            .order_by(col(Attempt.number))
        ).all():
            rejected.setdefault(job_id, {})[provider] = detail or "rejected"
    replaced: dict[str, Attempt] = {}
    wanted = {a.replaces: job_id for job_id, a in live.items() if a.replaces}
    for ids in _chunks(sorted(wanted)):
        for a in s.exec(select(Attempt).where(col(Attempt.id).in_(ids or []))).all():
            replaced[wanted[a.id]] = a
    facts.avoid = {j: frozenset(p) for j, p in avoid.items()}
    facts.rejected = rejected
    facts.interrupted_at = interrupted_at
    return Snapshot(jobs, live, last, live_count=live_count, replaced=replaced)
