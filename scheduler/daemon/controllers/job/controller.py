"""The per-job step: settle ended attempts, follow policies, place, and write launch intents.

No cloud I/O here: a placement becomes an Attempt row (the intent), which the
LaunchController turns into a cloud call. A pass reads every job it steps, with what the
decisions need, in a few queries (a `Snapshot`), decides in memory (placement and policies
are pure), and writes the intents, waiting reasons and running-job updates in batched
transactions, so its cost is a constant per job, not a few round trips per job. One job's
failure never stops the others: a batch that fails is written again job by job, and a job
whose step keeps failing is backed off exponentially and quarantined (FAILED, with the
reason) after `quarantine_after` failures in a row; the event is written when the reason
changes, not every pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from providers.base import Market, Offering
from scheduler.core import budget as budgets
from scheduler.core import price_moves
from scheduler.core.catalog import Catalog
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.deadline import DeadlineAdvice, DeadlineJob, DeadlinePlanner, placement_of
from scheduler.core.jobspec import JobSpec
from scheduler.core.lifecycle import JobFacts, LastAttempt, Limits, backoff_seconds, settle
from scheduler.core.placement import (
    Candidates,
    Decision,
    PlacementContext,
    Requirements,
    expected_cost,
    place,
    rate_column,
)
from scheduler.core.policy import Action
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import (
    ACTIVE_JOB_STATES,
    LIVE,
    WRITE_BATCH,
    CatalogHolder,
    Db,
    collections_paused,
    hours,
    later,
    safe_message,
)
from scheduler.daemon.controllers.rows import CHUNK, live_job_ids, load_by_id, table_of
from scheduler.daemon.controllers.rows import chunks as id_chunks
from scheduler.daemon.controllers.spend import (
    SpendController,
    hold_for_budget,
    request_stop,
    unaccrued_usd,
)
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.state.audit import emit, emit_many, event
from scheduler.state.models import Attempt, Job, PolicyState, PoolState

log = logging.getLogger("spotwise.reconcile")
PRIOR_HOURS = 10.0  # weight of the interruption prior, in hours of observed exposure


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
    memo: Candidates | None = None
    _requirements: dict[tuple[object, ...], Requirements] = field(default_factory=dict)
    _specs: dict[str, JobSpec] = field(default_factory=dict)
    _pool_rows: dict[str, np.ndarray] = field(default_factory=dict)
    _alternatives: dict[tuple[object, ...], tuple[Decision, Decision]] = field(default_factory=dict)

    def spec(self, spec_json: str) -> JobSpec:
        """The parsed spec, once per distinct JSON in a pass (jobs are often submitted many
        from one spec); treated as read-only."""
        spec = self._specs.get(spec_json)
        if spec is None:
            spec = self._specs[spec_json] = JobSpec.model_validate_json(spec_json)
        return spec

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


@dataclass
class Snapshot:
    """The jobs a pass steps and their attempts, read in a few queries."""

    jobs: list[Job]
    live: dict[str, Attempt]  # job id -> its live attempt
    last: dict[str, Attempt]  # job id -> its highest-numbered attempt
    settled: set[str] = field(default_factory=set)  # settled this pass, before the loop


@dataclass(frozen=True, slots=True)
class _Intent:
    job_id: str
    offering: Offering
    at: datetime
    nodes: int = 1  # instances to launch (fewer than asked: an elastic gang shrank)
    shrunk: str = ""  # why, when it did


@dataclass(frozen=True, slots=True)
class _LiveUpdate:
    job_id: str
    attempt_id: str
    progress: dict[str, Any] | None
    at: datetime


@dataclass(frozen=True, slots=True)
class _Hold:
    """A waiting job that a hard budget cannot pay from what is left of it: held under it."""

    job_id: str
    budget: str
    reason: str
    at: datetime


@dataclass
class _Writes:
    """What a pass has decided but not yet written, flushed every WRITE_BATCH jobs."""

    intents: list[_Intent] = field(default_factory=list)
    explains: list[tuple[str, str, datetime]] = field(default_factory=list)
    live: list[_LiveUpdate] = field(default_factory=list)
    holds: list[_Hold] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.intents) + len(self.explains) + len(self.live) + len(self.holds)

    def job_ids(self) -> list[str]:
        return (
            [i.job_id for i in self.intents]
            + [j for j, _, _ in self.explains]
            + [u.job_id for u in self.live]
            + [h.job_id for h in self.holds]
        )

    def one_by_one(self) -> Iterable[tuple[str, _Writes]]:
        for i in self.intents:
            yield i.job_id, _Writes(intents=[i])
        for x in self.explains:
            yield x[0], _Writes(explains=[x])
        for u in self.live:
            yield u.job_id, _Writes(live=[u])
        for h in self.holds:
            yield h.job_id, _Writes(holds=[h])


class JobController:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        catalog: CatalogHolder,
        stores: CheckpointStores,
        spend: SpendController,
        planner: Callable[[], DeadlinePlanner],
        config: Callable[[], Config],
    ) -> None:
        self.db = db
        self.clock = clock
        self.catalog = catalog
        self.stores = stores
        self.spend = spend
        self._planner = planner
        self._config = config
        self.placing = True  # cleared on SIGTERM: finish in-flight work, start nothing new

    # -- the pass ----------------------------------------------------------------------------
    def step(self, only: list[str] | None = None) -> list[str]:
        """Step every active job (or `only` these); returns the attempt ids of new intents."""
        with collections_paused():
            return self._step(only)

    def _step(self, only: list[str] | None) -> list[str]:
        with self.db.read() as s:
            jobs = self._active_jobs(s, only)
            if not jobs:
                return []  # an idle daemon's pass: one query
            facts = self._facts(s)
            snap = self._snapshot(s, jobs, only, facts)
        self._settle_ended(snap, facts.now)
        intents: list[str] = []
        writes = _Writes()
        for job in snap.jobs:
            try:
                self._step_job(job, snap, facts, writes)
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job.id)
                self._step_failed(job.id, e)
                continue
            if len(writes) >= WRITE_BATCH:
                intents.extend(self._flush(writes, facts))
                writes = _Writes()
        intents.extend(self._flush(writes, facts))
        return intents

    def _facts(self, s: Session) -> PassFacts:
        now = self.clock.now()
        cfg = self._config()
        prior = cfg.policy.spot_interruption_prior
        unavailable: dict[str, datetime] = {}
        rates: dict[str, float] = {}
        snap = self.catalog.current  # one snapshot for the whole pass, even if prices swap
        # What the provider can launch at once, narrowed by what a pool was seen to hold.
        gang_capacity: dict[str, tuple[int, str]] = dict(snap.request_limit)
        for p in s.exec(select(PoolState)).all():
            if p.gang_capacity is not None and later(p.gang_capacity_until, now):
                limit = gang_capacity.get(p.pool)
                if limit is None or p.gang_capacity < limit[0]:
                    gang_capacity[p.pool] = (p.gang_capacity, p.gang_capacity_reason)
            if p.unavailable_until is not None and p.unavailable_until > now:
                unavailable[p.pool] = p.unavailable_until
            if p.interruptions or p.exposure_hours:
                rates[p.pool] = (p.interruptions + prior * PRIOR_HOURS) / (
                    p.exposure_hours + PRIOR_HOURS
                )
        cat = snap.catalog
        return PassFacts(
            now=now,
            unavailable=unavailable,
            rates=rates,
            rate_by_row=rate_column(cat, rates, prior),
            statuses=self.spend.statuses(s, now),
            hold_hours=self.spend.hold_hours(),
            gang_capacity=gang_capacity,
            catalog=cat,
            memo=Candidates(cat),
        )

    @staticmethod
    def _active(chunk: list[str] | None) -> sa.ColumnElement[bool]:
        active: sa.ColumnElement[bool] = col(Job.state).in_(ACTIVE_JOB_STATES)
        return active if chunk is None else sa.and_(active, col(Job.id).in_(chunk))

    @staticmethod
    def _chunks(only: list[str] | None) -> list[list[str] | None]:
        return [None] if only is None else [only[i : i + CHUNK] for i in range(0, len(only), CHUNK)]

    def _active_jobs(self, s: Session, only: list[str] | None) -> list[Job]:
        """Every active job (or those of `only`), oldest first."""
        jobs: list[Job] = []
        chunks = self._chunks(only)
        for chunk in chunks:
            q = select(Job).where(self._active(chunk)).order_by(col(Job.created_at))
            jobs.extend(s.exec(q).all())
        if len(chunks) > 1:
            jobs.sort(key=lambda j: j.created_at)
        return jobs

    def _snapshot(
        self, s: Session, jobs: list[Job], only: list[str] | None, facts: PassFacts
    ) -> Snapshot:
        """The jobs' live and last attempts, and the pools each was recently interrupted
        in: three queries per chunk of ids, none per job."""
        recent = facts.now - self._config().daemon.avoid_after_interrupt
        joined = col(Attempt.job_id) == col(Job.id)
        live: dict[str, Attempt] = {}
        last: dict[str, Attempt] = {}
        avoid: dict[str, set[str]] = {}
        for chunk in self._chunks(only):
            active = self._active(chunk)
            for a in s.exec(
                select(Attempt).join(Job, joined).where(active, col(Attempt.state).in_(LIVE))
            ).all():
                live.setdefault(a.job_id, a)
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
            for job_id, pool in s.exec(
                select(Attempt.job_id, Attempt.pool)
                .join(Job, joined)
                .where(
                    active,
                    Attempt.end_reason == AttemptEnd.INTERRUPTED,
                    col(Attempt.ended_at) > recent,
                )
            ).all():
                avoid.setdefault(job_id, set()).add(pool)
        facts.avoid = {j: frozenset(p) for j, p in avoid.items()}
        return Snapshot(jobs, live, last)

    def _step_job(self, job: Job, snap: Snapshot, facts: PassFacts, writes: _Writes) -> None:
        now = self.clock.now()
        live = snap.live.get(job.id)
        if live is not None:
            self._step_live(job, live, facts, now, writes)
            return
        last = snap.last.get(job.id)
        fresh: Job | None = job
        if job.id in snap.settled:
            pass  # its last attempt was settled in a batch this pass: on to placement
        elif last is not None and last.end_reason is not None and job.settled_attempt != last.id:
            self._settle(job, last, now)  # its batch failed: this job alone
            fresh = self._reread(job.id)
        elif job.cancel_requested:
            self._finish(job.id, JobState.CANCELLED, "cancelled by user", now)
            return
        elif job.state is JobState.HELD:
            if not self._hold_ends(job, now):
                return  # most held jobs stay held: no write to find that out
            self._maybe_release_hold(job.id, now)
            fresh = self._reread(job.id)
        if fresh is None or fresh.state not in (JobState.PENDING, JobState.RECOVERING):
            return
        if not self.placing or (fresh.not_before is not None and fresh.not_before > now):
            return
        self._place(fresh, facts, now, writes)

    def _reread(self, job_id: str) -> Job | None:
        with self.db.read() as s:
            return s.get(Job, job_id)

    # -- writing what the pass decided ---------------------------------------------------------
    def _flush(self, writes: _Writes, facts: PassFacts) -> list[str]:
        """Write a batch in one transaction; if that fails, job by job, so one bad job is
        backed off (and eventually quarantined) alone."""
        if not len(writes):
            return []
        try:
            return self._write(writes, facts)
        except CrashForTest:
            raise
        except Exception as e:  # each job's own failure is logged in full below
            log.warning(
                "a batch of %d job writes failed (%s); writing them one by one",
                len(writes),
                safe_message(e),
            )
        made: list[str] = []
        for job_id, one in writes.one_by_one():
            try:
                made.extend(self._write(one, facts))
            except CrashForTest:
                raise
            except Exception as e:
                log.exception("job %s: step failed", job_id)
                self._step_failed(job_id, e)
        return made

    def _write(self, writes: _Writes, facts: PassFacts) -> list[str]:
        """One transaction: re-read the batch's jobs (and live attempts), then write what
        still holds. Intents, their jobs' new state and their events go in as one statement
        each (core: an ORM object per row costs more than the rest of the pass)."""
        made: list[dict[str, Any]] = []
        launching: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        with self.db.write() as s:
            others = [j for j, _, _ in writes.explains] + [u.job_id for u in writes.live]
            others += [h.job_id for h in writes.holds]
            jobs = load_by_id(s, Job, others)
            attempts = load_by_id(s, Attempt, [u.attempt_id for u in writes.live])
            if writes.intents:
                want = [i.job_id for i in writes.intents]
                heads = _job_heads(s, want)
                busy = live_job_ids(s, want)
                for it in writes.intents:
                    head = heads.get(it.job_id)
                    if head is None or head.state not in (JobState.PENDING, JobState.RECOVERING):
                        continue
                    if head.id in busy:
                        continue  # never two live attempts for one job
                    row, job_values = self._intent_row(head, it)
                    made.append(row)
                    launching.append(job_values)
                    events.append(
                        event(
                            it.at,
                            "launching",
                            job_values["reason"],
                            job_id=head.id,
                            attempt_id=row["id"],
                        )
                    )
            for job_id, reason, at in writes.explains:
                fresh = jobs.get(job_id)
                if fresh is not None and fresh.reason != reason:
                    fresh.reason, fresh.updated_at = reason, at
                    s.add(fresh)
                    events.append(event(at, "waiting", reason, job_id=job_id))
            if writes.holds:
                self._write_holds(s, writes.holds, jobs, events)
            if made:
                jt = table_of(Job)
                s.execute(
                    sa.update(jt)
                    .where(jt.c.id == sa.bindparam("b_id"))
                    .values(
                        attempts=sa.bindparam("attempts"),
                        state=JobState.LAUNCHING,
                        reason=sa.bindparam("reason"),
                        updated_at=sa.bindparam("updated_at"),
                    ),
                    launching,
                )
                s.execute(sa.insert(table_of(Attempt)), made)
            emit_many(s, events)
            for u in writes.live:
                self._apply_live(s, jobs.get(u.job_id), attempts.get(u.attempt_id), u, facts)
        return [row["id"] for row in made]

    def _intent_row(self, job: Any, it: _Intent) -> tuple[dict[str, Any], dict[str, Any]]:
        """The next Attempt of `job` (its id, state and attempt count, as re-read in the
        write) on the intent's offering, LAUNCHING with its deterministic token; and the
        job's new values (LAUNCHING, why), written in the same transaction."""
        o, now = it.offering, it.at
        number = job.attempts + 1
        attempt_id = f"{job.id}-a{number}"
        gang = f"{it.nodes} x " if it.nodes > 1 else ""
        reason = f"launching {gang}on {o.pool} at ${o.price_per_hour:.2f}/h"
        if it.shrunk:
            reason += f" ({it.shrunk})"
        attempt = {
            "id": attempt_id,
            "job_id": job.id,
            "number": number,
            "token": f"{self._config().daemon.owner}-{attempt_id}",
            "provider": self.catalog.provider_of_pool.get(o.pool, o.cloud),
            "cloud": o.cloud,
            "region": o.region,
            "zone": o.zone,
            "instance_type": o.instance_type,
            "market": o.market.value,
            "pool": o.pool,
            "price_per_hour": o.price_per_hour,
            "billed_price": o.price_per_hour,
            "gpu_count": o.gpu_count,
            "nodes": it.nodes,
            "state": AttemptState.LAUNCHING,
            "created_at": now,
        }
        return attempt, {"b_id": job.id, "attempts": number, "reason": reason, "updated_at": now}

    # -- running jobs ------------------------------------------------------------------------
    def _step_live(
        self, job: Job, a: Attempt, facts: PassFacts, now: datetime, writes: _Writes
    ) -> None:
        progress = None
        if a.state is AttemptState.RUNNING:
            try:
                progress = self.stores.progress(job.checkpoint_uri)
            except StoreError:
                progress = None  # the observe step reports unreadable stores
        if self._live_unchanged(job, a, progress, facts, now):
            return  # the common case in a steady pass: nothing to write
        writes.live.append(_LiveUpdate(job.id, a.id, progress, now))

    def _live_unchanged(
        self,
        job: Job,
        a: Attempt,
        progress: dict[str, Any] | None,
        facts: PassFacts,
        now: datetime,
    ) -> bool:
        """True when `_apply_live` would change nothing (judged on the pass's snapshot; the
        write itself re-reads the rows)."""
        step, total = _progress_numbers(progress)
        if (step is not None and step != job.progress_step) or (
            total is not None and total != job.total_steps
        ):
            return False
        if job.step_failures:
            return False
        if a.stop_requested_at is not None:
            return True
        if job.cancel_requested:
            return False
        if a.state is AttemptState.RUNNING and job.state is not JobState.RUNNING:
            return False
        if a.state is AttemptState.LAUNCHING and job.state is not JobState.LAUNCHING:
            return False
        if a.state is AttemptState.RUNNING and self.placing:
            spec = facts.spec(job.spec_json)
            if job.deadline is not None and spec.gpu_hours:
                return False  # the policy is asked, and what it learns saved, in the write
            if _follows_prices(spec, a) and self._price_move(job, a, spec, facts, now):
                return False
        return True

    def _apply_live(
        self,
        s: Session,
        job_w: Job | None,
        a_w: Attempt | None,
        u: _LiveUpdate,
        facts: PassFacts,
    ) -> None:
        now, progress = u.at, u.progress
        if job_w is None or a_w is None or a_w.state not in LIVE:
            return
        _record_progress(job_w, progress)
        if job_w.step_failures:
            job_w.step_failures, job_w.last_error = 0, ""
        if job_w.cancel_requested and a_w.stop_requested_at is None:
            request_stop(s, a_w, "cancel", now)
            emit(
                s,
                now,
                "stopping",
                "cancel requested: checkpointing and stopping",
                job_id=job_w.id,
                attempt_id=a_w.id,
            )
        elif a_w.stop_requested_at is None:
            if a_w.state is AttemptState.RUNNING and job_w.state is not JobState.RUNNING:
                job_w.state = JobState.RUNNING
                job_w.reason = f"on {a_w.pool} at ${a_w.price_per_hour:.2f}/h"
                job_w.updated_at = now
            elif a_w.state is AttemptState.LAUNCHING and job_w.state not in (JobState.LAUNCHING,):
                job_w.state = JobState.LAUNCHING
                job_w.updated_at = now
            if a_w.state is AttemptState.RUNNING and self.placing:
                spec = facts.spec(job_w.spec_json)
                if job_w.deadline is not None and spec.gpu_hours:
                    self._follow_deadline_policy(s, job_w, a_w, facts, now)
                if a_w.stop_requested_at is None and _follows_prices(spec, a_w):
                    self._follow_prices(s, job_w, a_w, spec, facts, now)
        s.add(job_w)

    def _follow_deadline_policy(
        self, s: Session, job: Job, a: Attempt, facts: PassFacts, now: datetime
    ) -> None:
        """Ask the deadline policy about the running attempt; move it if the policy would run
        elsewhere (back to spot once capacity returns, or to on-demand as slack runs out)."""
        spec = facts.spec(job.spec_json)
        if not spec.gpu_hours:
            return
        planner = self._planner()
        current = placement_of(a.market, a.zone)
        ran = hours(now - (a.started_at or a.created_at))
        # No budget headroom here: the running attempt's own burn would make its pool look
        # unaffordable to itself; budgets are judged when the next attempt is placed.
        ctx = self._context(job, spec, facts, now, with_budget=False)
        advice = self._advise(
            s,
            planner,
            now,
            _deadline_job(job, spec, now, a),
            Requirements.from_spec(spec),
            facts.catalog,
            ctx,
            current=current,
            remaining_overhead=max(0.0, planner.restart_overhead - ran),
            current_price=a.price_per_hour,
        )
        if not advice.moves_from(current):
            return
        request_stop(s, a, "policy", now)
        job.reason = f"moving: {advice.reason}"
        job.updated_at = now
        emit(
            s,
            now,
            "policy_move",
            f"from {current} to {advice.action}: {advice.reason}",
            job_id=job.id,
            attempt_id=a.id,
        )

    def _advise(
        self,
        s: Session,
        planner: DeadlinePlanner,
        now: datetime,
        job: DeadlineJob,
        req: Requirements,
        cat: Catalog,
        ctx: PlacementContext,
        current: Action | None = None,
        remaining_overhead: float = 0.0,
        current_price: float | None = None,
    ) -> DeadlineAdvice:
        """planner.advise, with the job's policy restored from (and saved to) its PolicyState
        row: what it learned survives restarts and reloads of the daemon."""
        shape = json.dumps([[str(g) for g in req.gpus], sorted(req.clouds), sorted(req.regions)])
        if not planner.knows(job.job_id):
            row = s.get(PolicyState, job.job_id)
            warm = False
            if row is None:  # a new job: start from the daemon's experience of this shape
                warm = True
                row = s.exec(
                    select(PolicyState)
                    .where(PolicyState.shape == shape, PolicyState.job_id != job.job_id)
                    .order_by(col(PolicyState.updated_at).desc())
                ).first()
            if row is not None and row.policy == planner.policy_name:
                try:
                    state = json.loads(row.state_json)
                    if warm:
                        planner.warm(job.job_id, state)
                    else:
                        planner.restore(job.job_id, state, hours(now - row.updated_at))
                except (ValueError, TypeError, KeyError):
                    log.warning("job %s: unreadable policy state; starting cold", job.job_id)
        advice = planner.advise(job, req, cat, ctx, current, remaining_overhead, current_price)
        learned = planner.state(job.job_id)
        if learned is not None:
            mine = s.get(PolicyState, job.job_id) or PolicyState(
                job_id=job.job_id, policy=planner.policy_name, updated_at=now
            )
            mine.policy, mine.shape = planner.policy_name, shape
            mine.state_json, mine.updated_at = json.dumps(learned), now
            s.add(mine)
        return advice

    def _price_move(
        self, job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, now: datetime
    ) -> tuple[price_moves.Move, price_moves.Alternative | None] | None:
        """Whether a running attempt's price no longer pays (scheduler.core.price_moves
        decides): pure, on what the pass read. A deadline job only leaves a spot price above
        on-demand here; where else it runs is its policy's call, on the next placement."""
        cat = facts.catalog
        rows = facts.pool_rows(a.pool)
        if len(rows) == 0:
            return None  # not in the catalog now: no price to judge it by
        ctx = self._context(job, spec, facts, now, with_budget=False)
        per_hour = replace(ctx, remaining_gpu_hours=None)  # expected $ per hour of work
        cur_rate = float(expected_cost(cat, rows[:1], per_hour)[0])
        alt_ctx = replace(per_hour, avoid_pools=ctx.avoid_pools | {a.pool})
        req = facts.requirements(spec)
        best, ondemand = facts.alternatives(req, alt_ctx)
        od_price = ondemand.offering.price_per_hour if ondemand.offering is not None else None
        price = float(cat.price[rows[0]])
        ran = hours(now - (a.started_at or a.created_at))
        cur = price_moves.Running(a.pool, a.market == Market.SPOT.value, price, cur_rate, ran)
        alt = None
        if best.offering is not None and best.expected_cost is not None:
            alt = price_moves.Alternative(
                best.offering.pool, best.offering.price_per_hour, best.expected_cost
            )
        above_on_demand = cur.spot and od_price is not None and price > od_price
        if job.deadline is not None and spec.gpu_hours and not above_on_demand:
            return None  # a cheaper pool is the deadline policy's call, not a price move
        # Without an estimate, assume the job runs as long again as it has so far.
        remaining = max(1.0, ran)
        if ctx.remaining_gpu_hours:
            remaining = ctx.remaining_gpu_hours / max(a.gpu_count, 1)
        costs = price_moves.MoveCosts(
            restart_overhead_hours=ctx.restart_overhead_hours,
            checkpoint_hours=hours(self._config().daemon.stop_grace),
            lost_work_hours=ctx.lost_work_hours,
        )
        pol = self._config().policy
        move = price_moves.decide(
            cur, alt, od_price, remaining, costs, pol.follow_min_saving, hours(pol.follow_min_gap)
        )
        return None if move is None else (move, alt)

    def _follow_prices(
        self, s: Session, job: Job, a: Attempt, spec: JobSpec, facts: PassFacts, now: datetime
    ) -> None:
        """Move a running attempt whose price no longer pays: decided on the fresh rows."""
        found = self._price_move(job, a, spec, facts, now)
        if found is None:
            return
        move, alt = found
        request_stop(s, a, "price", now)
        job.reason = f"moving: {move.reason}"
        job.updated_at = now
        emit(
            s,
            now,
            "price_move",
            f"from {a.pool} at ${move.old_price:.2f}/h to {alt.pool if alt else '?'} at "
            f"${move.new_price:.2f}/h: {move.reason}",
            job_id=job.id,
            attempt_id=a.id,
        )

    # -- settling ----------------------------------------------------------------------------
    def _settle_ended(self, snap: Snapshot, now: datetime) -> None:
        """Settle every job whose last attempt ended, WRITE_BATCH jobs per transaction (a
        wave of interruptions or of finished jobs is a few commits, not one per job), then
        read those jobs back at once for the pass. A job of a batch that failed is left to
        its own step, which settles it alone (and backs it off alone if it fails again)."""
        due = [
            (job, last)
            for job in snap.jobs
            if job.id not in snap.live
            and (last := snap.last.get(job.id)) is not None
            and last.end_reason is not None
            and job.settled_attempt != last.id
        ]
        if not due:
            return
        for k in range(0, len(due), WRITE_BATCH):
            batch = due[k : k + WRITE_BATCH]
            final = {job.id: self._final_progress(job) for job, _ in batch}  # I/O first
            try:
                with self.db.write() as s:
                    jobs = load_by_id(s, Job, [job.id for job, _ in batch])
                    for job, last in batch:
                        row = jobs.get(job.id)
                        if row is not None:
                            self._settle_in(s, row, last, now, final[job.id])
            except CrashForTest:
                raise
            except Exception as e:
                log.warning(
                    "settling %d jobs together failed (%s); one by one", len(batch), safe_message(e)
                )
                continue
            snap.settled.update(job.id for job, _ in batch)
        with self.db.read() as s:
            fresh = load_by_id(s, Job, sorted(snap.settled))
        snap.jobs = [fresh.get(j.id, j) if j.id in snap.settled else j for j in snap.jobs]
        snap.jobs = [j for j in snap.jobs if j.id not in snap.settled or j.id in fresh]

    def _settle(self, job: Job, last: Attempt, now: datetime) -> None:
        final = self._final_progress(job)
        with self.db.write() as s:
            row = s.get(Job, job.id)
            if row is not None:
                self._settle_in(s, row, last, now, final)

    def _final_progress(self, job: Job) -> dict[str, Any] | None:
        """progress.json once more as the attempt ends: the running passes read it at most
        once a pass, so the trainer's last steps (its final save) would otherwise never
        reach `status`. Cosmetic, so an unreadable store only leaves the last step seen."""
        if job.total_steps and job.progress_step == job.total_steps:
            return None  # already at its last step: spare the store a read
        try:
            return self.stores.progress(job.checkpoint_uri)
        except CrashForTest:
            raise
        except Exception as e:  # StoreError, or a store we cannot parse: settle regardless
            log.debug("job %s: final progress unreadable: %s", job.id, safe_message(e))
            return None

    def _settle_in(
        self,
        s: Session,
        job: Job,
        last: Attempt,
        now: datetime,
        progress: dict[str, Any] | None = None,
    ) -> None:
        """The job's next state now that `last` ended (lifecycle.settle decides)."""
        if job.settled_attempt == last.id or job.state.terminal:
            return
        _record_progress(job, progress)
        cfg = self._config().daemon
        assert last.end_reason is not None
        t = settle(
            JobFacts(job.state, job.cancel_requested, job.recoveries, job.failures),
            LastAttempt(last.id, last.end_reason, last.pool, last.exit_code, last.detail),
            Limits(cfg.max_attempts, cfg.max_preemptions),
        )
        job.settled_attempt = last.id
        job.recoveries += t.recoveries
        job.failures += t.failures
        job.updated_at = now
        if t.state is JobState.HELD and job.state is JobState.HELD and job.reason:
            pass  # the budget stop already wrote the full reason and the window
        else:
            job.state, job.reason = t.state, t.reason
        if t.failures:
            delay = backoff_seconds(
                job.failures, cfg.backoff_base.total_seconds(), cfg.backoff_max.total_seconds()
            )
            job.not_before = now + timedelta(seconds=delay)
        s.add(job)
        emit(s, now, t.event, t.reason, job_id=job.id, attempt_id=last.id, level=t.level)

    def _finish(self, job_id: str, state: JobState, reason: str, now: datetime) -> None:
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return
            job.state, job.reason, job.updated_at = state, reason, now
            s.add(job)
            emit(s, now, state.value.lower(), reason, job_id=job.id)

    def _maybe_release_hold(self, job_id: str, now: datetime) -> None:
        """A budget-HELD job waits until that budget's window resets or its limit is raised
        (or it is removed), so it neither churns at the limit nor waits forever."""
        rules = {r.name: r for r in self._config().budget_rules()}
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state is not JobState.HELD:
                return
            if not self._hold_ends(job, now, rules):
                return
            job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
            job.reason = f"budget '{job.held_budget}' has a new window or limit"
            job.held_budget = job.held_window_start = job.held_limit_usd = None
            job.updated_at = now
            s.add(job)
            emit(s, now, "released", job.reason, job_id=job.id)

    def _hold_ends(
        self, job: Job, now: datetime, rules: dict[str, budgets.BudgetRule] | None = None
    ) -> bool:
        """Whether the budget that holds `job` has a new window or limit (or is gone)."""
        if rules is None:
            rules = {r.name: r for r in self._config().budget_rules()}
        rule = rules.get(job.held_budget or "")
        if rule is not None and rule.hard:
            same_window = budgets.window_start(rule.window, now) == job.held_window_start
            if same_window and rule.limit_usd <= (job.held_limit_usd or 0.0):
                return False
        return True

    # -- placement ---------------------------------------------------------------------------
    def _context(
        self,
        job: Job,
        spec: JobSpec,
        facts: PassFacts,
        now: datetime,
        with_budget: bool = True,
    ) -> PlacementContext:
        cfg = self._config()
        affordable, budget_name = None, ""
        if with_budget:
            affordable, budget_name = budgets.max_affordable_price(
                facts.statuses, job.name, job.team, facts.hold_hours
            )
        remaining = spec.gpu_hours
        if remaining and job.total_steps and job.progress_step:
            remaining = spec.gpu_hours * max(0.0, 1 - job.progress_step / job.total_steps)  # type: ignore[operator]
        return PlacementContext(
            now=now,
            unavailable=facts.unavailable,
            avoid_pools=facts.avoid.get(job.id, frozenset()),
            max_affordable_price=affordable,
            budget_name=budget_name,
            remaining_gpu_hours=remaining or None,
            interruption_rate=facts.rates,
            rate_by_row=facts.rate_by_row,
            restart_overhead_hours=hours(cfg.policy.restart_overhead),
            lost_work_hours=hours(spec.checkpoint_interval) / 2,
            gang_capacity=facts.gang_capacity,
        )

    def _place(self, job: Job, facts: PassFacts, now: datetime, writes: _Writes) -> None:
        """Decide where `job` goes (pure); the intent is written with the pass's batch."""
        spec = facts.spec(job.spec_json)
        req = facts.requirements(spec)
        ctx = self._context(job, spec, facts, now)
        if job.deadline is not None and spec.gpu_hours:
            with self.db.write() as s:
                advice = self._advise(
                    s, self._planner(), now, _deadline_job(job, spec, now), req, facts.catalog, ctx
                )
            if advice.context is None:
                self._explain(job, advice.reason, now, writes)
                return
            ctx = advice.context
        decision = place(req, facts.catalog, ctx, facts.memo)
        if decision.offering is None:
            budget = self._budget_hold(job, req, ctx, facts)
            if budget is not None:
                why = f"{decision.reason}; held until budget '{budget}' has a new window or limit"
                writes.holds.append(_Hold(job.id, budget, why, now))
                return
            self._explain(job, decision.reason, now, writes)
            return
        o = decision.offering
        shrunk = decision.reason if decision.nodes < req.nodes else ""
        writes.intents.append(_Intent(job.id, o, now, decision.nodes, shrunk))
        # The next job in this pass sees the smaller headroom (the launch reserves its burn,
        # N x the price for a gang).
        facts.statuses = [
            replace(st, burn_per_hour=st.burn_per_hour + o.price_per_hour * decision.nodes)
            if st.rule.applies_to(job.name, job.team)
            else st
            for st in facts.statuses
        ]

    def _write_holds(
        self, s: Session, holds: list[_Hold], jobs: dict[str, Job], events: list[dict[str, Any]]
    ) -> None:
        """HELD under the budget, with its window and limit (released, as a budget stop's
        hold is, when the window resets or the limit is raised), if the job still waits."""
        rules = {r.name: r for r in self._config().budget_rules()}
        busy = live_job_ids(s, [h.job_id for h in holds])
        for h in holds:
            job, rule = jobs.get(h.job_id), rules.get(h.budget)
            if job is None or rule is None or h.job_id in busy:
                continue
            if job.state not in (JobState.PENDING, JobState.RECOVERING):
                continue
            hold_for_budget(job, rule, h.reason, h.at)
            s.add(job)
            events.append(event(h.at, "held", h.reason, job_id=job.id, level="warning"))

    def _budget_hold(
        self, job: Job, req: Requirements, ctx: PlacementContext, facts: PassFacts
    ) -> str | None:
        """The hard budget to hold a job under that it cannot pay from what is left of it,
        None if the job should wait instead: another job's reserved burn is what blocks
        (it frees up when that job ends), or something besides the budget does. A waiting
        job was left waiting forever in a total window (the kill -9 campaign found one,
        RECOVERING after its attempt was lost with most of the budget spent)."""
        if ctx.max_affordable_price is None:
            return None
        cap, name = budgets.max_affordable_price(
            facts.statuses, job.name, job.team, facts.hold_hours, count_burn=False
        )
        if cap is None:
            return None
        cat, memo = facts.catalog, facts.memo
        if not place(req, cat, replace(ctx, max_affordable_price=None), memo).placed:
            return None  # the budget is not what blocks (the cheap check, first)
        # any adequate offering the remainder could pay: in any market (a deadline policy
        # may ask for on-demand now, spot later) and in pools now backing off
        anywhere = replace(
            ctx, markets=None, spot_zones=None, unavailable={}, avoid_pools=frozenset()
        )
        if place(req, cat, replace(anywhere, max_affordable_price=cap), memo).placed:
            return None
        return name

    @staticmethod
    def _explain(job: Job, reason: str, now: datetime, writes: _Writes) -> None:
        """Record why a job waits (once per distinct reason, not every pass)."""
        if job.reason != reason:
            writes.explains.append((job.id, reason, now))

    def _step_failed(self, job_id: str, e: Exception) -> None:
        now = self.clock.now()
        cfg = self._config().daemon
        msg = safe_message(e)
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state.terminal:
                return
            job.step_failures += 1
            delay = backoff_seconds(
                job.step_failures, cfg.backoff_base.total_seconds(), cfg.backoff_max.total_seconds()
            )
            job.not_before = now + timedelta(seconds=delay)
            if job.step_failures >= cfg.quarantine_after:
                # A job that keeps failing must not keep an instance running (and billed).
                for a in s.exec(
                    select(Attempt).where(Attempt.job_id == job_id, col(Attempt.state).in_(LIVE))
                ).all():
                    request_stop(s, a, "quarantine", now)
                job.state = JobState.FAILED
                job.reason = f"quarantined after {job.step_failures} failed steps: {msg}"
                emit(s, now, "quarantined", job.reason, job_id=job_id, level="error")
            elif msg != job.last_error:
                emit(s, now, "step_failed", msg, job_id=job_id, level="error")
            job.last_error = msg
            s.add(job)


def _job_heads(s: Session, job_ids: list[str]) -> dict[str, Any]:
    """id, state and attempt count of these jobs (core rows, no ORM object), by id."""
    jt = table_of(Job)
    out: dict[str, Any] = {}
    for chunk in id_chunks(job_ids):
        q = sa.select(jt.c.id, jt.c.state, jt.c.attempts).where(jt.c.id.in_(chunk))
        out.update((r.id, r) for r in s.execute(q))
    return out


def _deadline_job(
    job: Job, spec: JobSpec, now: datetime, live: Attempt | None = None
) -> DeadlineJob:
    """The job as its deadline policy sees it. `spent` is what the daemon recorded it paying
    (the price actually paid, plus the live attempt's time since the last accrual), per
    instance as the policy's prices are: its regret hedge must count every dollar, including
    hours its own ledger never saw (the daemon down, a slow pass, a policy that started cold
    after a SIGHUP or an unreadable state row)."""
    per_instance = spec.gpu_specs()[0].count * spec.nodes
    progress = 0.0
    if job.total_steps and job.progress_step:
        progress = min(1.0, job.progress_step / job.total_steps)
    assert job.deadline is not None and spec.gpu_hours is not None
    paid = job.cost_usd + (unaccrued_usd(live, now) if live is not None else 0.0)
    return DeadlineJob(
        job.id,
        job.created_at,
        job.deadline,
        spec.gpu_hours / per_instance,
        progress,
        spent=paid / spec.nodes,
    )


def _follows_prices(spec: JobSpec, a: Attempt) -> bool:
    """A gang moves only when the cloud or its policy moves it: a price move would restart
    every node for a per-node saving."""
    return spec.migrate != "never" and a.nodes == 1


def _progress_numbers(progress: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """progress.json's step and total_steps, each None unless it is an integer."""
    if not progress:
        return None, None
    step, total = progress.get("step"), progress.get("total_steps")
    return (
        step if type(step) is int else None,
        total if type(total) is int else None,
    )


def _record_progress(job: Job, progress: dict[str, Any] | None) -> None:
    """The trainer's step and total from progress.json, where they are numbers that moved."""
    step, total = _progress_numbers(progress)
    if step is not None and step != job.progress_step:
        job.progress_step = step
    if total is not None and total != job.total_steps:
        job.total_steps = total
