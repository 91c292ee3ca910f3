"""Accrues spend at the price actually paid and enforces hard budgets, never waiting on a cloud.

Each accrual charges every running attempt for the time since it was last accrued, at the
price of that interval (its pool's price as last polled), into per-hour SpendBuckets; a
budget's spend is one aggregate over its window's buckets. Enforcement only writes stop
requests; the StopController makes the cloud calls, so a slow terminate never delays the
decision that keeps a hard budget.

A gang is billed per node: each of its AttemptInstance rows from that instance's own launch
to its own end, at the attempt's interval price (a replacement node in another pool at its
own); the attempt's cost is their sum, and its burn (what budgets reserve) is N x the price.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from scheduler.core import budget as budgets
from scheduler.core.catalog import Catalog
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.states import AttemptState, JobState
from scheduler.daemon.controllers.base import LIVE, CatalogHolder, Db, hours
from scheduler.daemon.controllers.gang import nodes_of
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, AttemptInstance, BudgetSpend, Job, SpendBucket


@dataclass(frozen=True, slots=True)
class Increment:
    hour: datetime
    usd: float


def split_by_hour(start: datetime, end: datetime, price: float) -> list[Increment]:
    """price x (end - start), cut at UTC hour boundaries (negative when end < start: a refund
    for time accrued past an end we learned of late)."""
    sign = 1.0
    if end < start:
        start, end, sign = end, start, -1.0
    out: list[Increment] = []
    t = start
    while t < end:
        hour = t.replace(minute=0, second=0, microsecond=0)
        nxt = min(end, hour + timedelta(hours=1))
        out.append(Increment(hour, sign * price * hours(nxt - t)))
        t = nxt
    return out


class SpendController:
    def __init__(
        self, db: Db, clock: Clock, catalog: CatalogHolder, config: Callable[[], Config]
    ) -> None:
        self.db = db
        self.clock = clock
        self.catalog = catalog
        self._config = config

    def hold_hours(self) -> float:
        """Least time a launched attempt is surely paid for: one accrual plus the stop grace."""
        d = self._config().daemon
        return hours(d.accrue_interval + d.stop_grace)

    # -- accrual -----------------------------------------------------------------------------
    def accrue(self) -> None:
        """Charge attempts up to now (or their end), publish budgets, enforce hard ones."""
        now = self.clock.now()
        with self.db.write() as s:
            self._accrue(s, now, self.catalog.catalog)
        with self.db.write() as s:
            self.enforce(s, now)

    def reprice(self, new: Catalog, swap: Callable[[], None]) -> None:
        """New prices take effect now: charge everything up to now at the prices that were in
        effect, switch running attempts to the new ones and swap the catalog in the same
        write (no accrual can slip in between), then re-check budgets against the new burn
        at once (a price rise must not wait for the next accrual)."""
        now = self.clock.now()
        with self.db.write() as s:
            self._accrue(s, now, new)
            swap()
        with self.db.write() as s:
            self.enforce(s, now)

    def bill_to_end(self, s: Session, now: datetime, attempt_ids: Sequence[str]) -> None:
        """Bill these attempts, whose end (or a node's) was just written, up to that end in
        the same transaction, and publish the budgets again: an end learned after an accrual
        had charged past it is refunded at once, so a job's cost, its buckets and its
        budgets never show time the instance did not run."""
        if not attempt_ids:
            return
        q = _STARTED.where(col(Attempt.id).in_(list(attempt_ids)))
        rows = [(a, name, team) for a, name, team in s.exec(q).all()]
        if rows:
            self._accrue(s, now, self.catalog.catalog, rows)
            self.enforce(s, now)

    def _accrue(
        self,
        s: Session,
        now: datetime,
        prices: Catalog,
        rows: list[tuple[Attempt, str, str]] | None = None,
    ) -> None:
        """Prices are piecewise constant between polls: each interval is charged at the price
        in effect during it (`billed_price`), then the attempt takes the current price."""
        if rows is None:
            rows = _to_accrue(s)
        job_delta: dict[str, float] = {}
        buckets = _buckets_since(s, rows)
        nodes = nodes_of(s, [a.id for a, _, _ in rows]) if rows else {}
        for a, job_name, team in rows:
            assert a.started_at is not None
            if a.nodes > 1:
                delta = self._accrue_gang(s, a, nodes.get(a.id, []), now, job_name, team)
                if not a.ended_at:
                    offer = prices.offering_for_pool(a.pool)
                    if offer is not None:
                        a.billed_price = offer.price_per_hour
                s.add(a)
                if delta:
                    job_delta[a.job_id] = job_delta.get(a.job_id, 0.0) + delta
                continue
            start = a.accrued_until or a.started_at
            # An attempt whose instance ended but whose outcome is not known yet (store unreadable)
            # carries ended_at already: billing stops there too.
            ended = a.ended_at is not None
            end = a.ended_at if a.ended_at is not None else now
            price = a.billed_price or a.price_per_hour
            delta = 0.0
            if end != start:
                incs = split_by_hour(start, end, price)
                for inc in incs:
                    self._add_bucket(s, inc, a, job_name, team, buckets)
                delta = sum(i.usd for i in incs)
                a.cost_usd = round(a.cost_usd + delta, 9)
                a.accrued_until = end
                for row in nodes.get(a.id, [])[:1]:  # node 0 mirrors a single-node attempt
                    row.cost_usd, row.accrued_until = a.cost_usd, end
                    s.add(row)
            if not ended:
                offer = prices.offering_for_pool(a.pool)
                if offer is not None:
                    a.billed_price = offer.price_per_hour
            s.add(a)
            if delta:
                job_delta[a.job_id] = job_delta.get(a.job_id, 0.0) + delta
        if job_delta:
            # One executemany; the session holds no Job objects to keep in step.
            jobs: sa.Table = Job.__table__  # type: ignore[attr-defined]
            s.execute(
                sa.update(jobs)
                .where(jobs.c.id == sa.bindparam("job"))
                .values(cost_usd=jobs.c.cost_usd + sa.bindparam("delta")),
                [{"job": job_id, "delta": delta} for job_id, delta in job_delta.items()],
            )

    def _accrue_gang(
        self,
        s: Session,
        a: Attempt,
        rows: list[AttemptInstance],
        now: datetime,
        job_name: str,
        team: str,
    ) -> float:
        """Each node from its own launch (or last accrual) to its own end (or now)."""
        price = a.billed_price or a.price_per_hour
        total = 0.0
        for r in rows:
            if r.started_at is None:
                continue
            start = r.accrued_until or r.started_at
            end = r.ended_at or a.ended_at or now
            if end == start:
                continue
            # A replacement in another pool (the other market) bills at its own price.
            node_price = price if r.price_per_hour is None else r.price_per_hour
            incs = split_by_hour(start, end, node_price)
            for inc in incs:
                self._add_bucket(s, inc, a, job_name, team)
            usd = sum(i.usd for i in incs)
            r.cost_usd = round(r.cost_usd + usd, 9)
            r.accrued_until = end
            s.add(r)
            total += usd
        a.cost_usd = round(a.cost_usd + total, 9)
        a.accrued_until = a.ended_at or now
        return total

    @staticmethod
    def _add_bucket(
        s: Session,
        inc: Increment,
        a: Attempt,
        job_name: str,
        team: str,
        buckets: dict[tuple[datetime, str], SpendBucket] | None = None,
    ) -> None:
        """Add to the attempt's bucket for that hour. `buckets` (from `_buckets_since`) saves
        a query, and the autoflush before it, per bucket."""
        if buckets is None:
            row = s.exec(
                select(SpendBucket).where(
                    SpendBucket.hour == inc.hour, SpendBucket.attempt_id == a.id
                )
            ).first()
        else:
            row = buckets.get((inc.hour, a.id))
        if row is None:
            row = SpendBucket(
                hour=inc.hour,
                attempt_id=a.id,
                job_id=a.job_id,
                job_name=job_name,
                team=team,
                cloud=a.cloud,
            )
        row.usd += inc.usd
        s.add(row)
        if buckets is not None:
            buckets[(inc.hour, a.id)] = row

    # -- budgets -----------------------------------------------------------------------------
    def statuses(self, s: Session, now: datetime) -> list[budgets.BudgetStatus]:
        """Each configured budget's spend in its window and the burn it covers: aggregates."""
        out = []
        for rule in self._config().budget_rules():
            q = select(func.coalesce(func.sum(SpendBucket.usd), 0.0))
            start = budgets.window_start(rule.window, now)
            if start is not None:
                q = q.where(SpendBucket.hour >= start)
            burn = select(
                func.coalesce(
                    func.sum(
                        func.coalesce(Attempt.billed_price, Attempt.price_per_hour) * Attempt.nodes
                    ),
                    0.0,
                )
            ).where(Attempt.job_id == Job.id, col(Attempt.state).in_(LIVE))
            kind, _, value = rule.scope.partition(":")
            if kind == "team":
                q = q.where(SpendBucket.team == value)
                burn = burn.where(Job.team == value)
            elif kind == "job":
                q = q.where(SpendBucket.job_name == value)
                burn = burn.where(Job.name == value)
            elif kind == "user":  # the jobs this user submitted (the bucket names the job)
                mine = select(Job.id).where(Job.submitted_by == value)
                q = q.where(col(SpendBucket.job_id).in_(mine))
                burn = burn.where(Job.submitted_by == value)
            spent = float(s.exec(q).one())
            # Spend since the last accrual is not in the buckets yet: add it, so a launch
            # decision between two accruals sees everything paid so far.
            pending = self._unaccrued(s, rule, now)
            out.append(
                budgets.BudgetStatus(rule, max(0.0, spent + pending), float(s.exec(burn).one()))
            )
        return out

    @staticmethod
    def _unaccrued(s: Session, rule: budgets.BudgetRule, now: datetime) -> float:
        q = select(Attempt, Job.name, Job.team, Job.submitted_by).where(
            Attempt.job_id == Job.id,
            col(Attempt.state).in_(LIVE),
            col(Attempt.started_at).is_not(None),
        )
        since = budgets.window_start(rule.window, now)
        return sum(
            unaccrued_usd(a, now, since)
            for a, name, team, user in s.exec(q).all()
            if rule.applies_to(name, team, user)
        )

    def enforce(self, s: Session, now: datetime) -> list[budgets.BudgetStatus]:
        """Publish every budget; stop what would cross a hard limit before the next check."""
        hold = self.hold_hours()
        statuses = self.statuses(s, now)
        for st in statuses:
            before = self._publish(s, st, now)
            if budgets.must_stop(st, hold):
                self._stop_for_budget(s, st, now)
            elif budgets.soft_exceeded(st) and before != "exhausted":
                rule = st.rule
                msg = f"soft budget '{rule.name}' spent ${st.spent:.2f} of ${rule.limit_usd:.2f}"
                emit(s, now, "budget_warning", msg, level="warning")
        return statuses

    @staticmethod
    def _publish(s: Session, st: budgets.BudgetStatus, now: datetime) -> str:
        rule = st.rule
        row = s.get(BudgetSpend, rule.name) or BudgetSpend(
            name=rule.name,
            scope=rule.scope,
            window=rule.window.value,
            limit_usd=rule.limit_usd,
            hard=rule.hard,
            updated_at=now,
        )
        before = row.state
        state = (
            "exhausted" if st.exhausted else "warning" if st.spent > 0.8 * rule.limit_usd else "ok"
        )
        row.sqlmodel_update(
            {
                "scope": rule.scope,
                "window": rule.window.value,
                "window_start": budgets.window_start(rule.window, now),
                "limit_usd": rule.limit_usd,
                "hard": rule.hard,
                "spent_usd": round(st.spent, 6),
                "burn_per_hour": st.burn_per_hour,
                "state": state,
                "updated_at": now,
            }
        )
        s.add(row)
        return before

    @staticmethod
    def _stop_for_budget(s: Session, st: budgets.BudgetStatus, now: datetime) -> None:
        rows = s.exec(
            select(Attempt, Job).where(
                Attempt.job_id == Job.id,
                col(Attempt.state).in_((AttemptState.LAUNCHING, AttemptState.RUNNING)),
                col(Attempt.stop_requested_at).is_(None),
            )
        ).all()
        rule = st.rule
        for a, job in rows:
            if not rule.applies_to(job.name, job.team, job.submitted_by):
                continue
            why = (
                f"hard budget '{rule.name}' (${rule.limit_usd:.2f}/{rule.window.value}) "
                f"would be exceeded: ${st.spent:.2f} spent"
            )
            request_stop(s, a, "budget", now)
            if not job.state.terminal:
                hold_for_budget(job, rule, why, now)
                s.add(job)
            emit(
                s,
                now,
                "budget_stop",
                why + "; checkpointing and stopping",
                job_id=job.id,
                attempt_id=a.id,
                level="warning",
            )


def unaccrued_usd(a: Attempt, now: datetime, since: datetime | None = None) -> float:
    """What `a` (all its nodes) has cost since its last accrual (or `since`, if later), at its
    interval price: spend that is paid but not yet in the buckets or `cost_usd`."""
    if a.started_at is None:
        return 0.0
    start = a.accrued_until or a.started_at
    if since is not None:
        start = max(start, since)
    end = min(now, a.ended_at) if a.ended_at is not None else now  # ended: store unreadable
    if end <= start:
        return 0.0
    return (a.billed_price or a.price_per_hour) * a.nodes * hours(end - start)


def _to_accrue(s: Session) -> list[tuple[Attempt, str, str]]:
    """Every started attempt that is live or not yet accrued up to its end, with its job's
    name and team: two indexed reads (by state; by the partial index of unaccrued ones),
    never a scan of the finished attempts a long-lived database holds."""
    out: dict[str, tuple[Attempt, str, str]] = {}
    for a, name, team in s.exec(_STARTED.where(col(Attempt.state).in_(LIVE))).all():
        out[a.id] = (a, name, team)
    for row in _ended_unaccrued(s):
        out.setdefault(row[0].id, row)
    return list(out.values())


def _ended_unaccrued(s: Session) -> list[tuple[Attempt, str, str]]:
    """Started attempts not accrued up to their end (or never accrued), through the partial
    index: its predicate (models.UNACCRUED), term for term."""
    q = _STARTED.where(
        col(Attempt.accrued_until).is_(None) | (Attempt.accrued_until != Attempt.ended_at)
    )
    return [(a, name, team) for a, name, team in s.exec(q).all()]


_STARTED = select(Attempt, Job.name, Job.team).where(
    Attempt.job_id == Job.id, col(Attempt.started_at).is_not(None)
)


def _buckets_since(
    s: Session, rows: Sequence[tuple[Attempt, str, str]]
) -> dict[tuple[datetime, str], SpendBucket]:
    """The existing buckets this accrual may add to (each attempt's, from the hour it was
    last accrued, or the earlier end a refund goes back to), a chunk of attempts per query,
    by (hour, attempt id)."""
    since: datetime | None = None
    for a, _, _ in rows:
        start = a.accrued_until or a.started_at
        if start is not None and a.ended_at is not None:
            start = min(start, a.ended_at)
        if start is not None and (since is None or start < since):
            since = start
    out: dict[tuple[datetime, str], SpendBucket] = {}
    if since is None:
        return out
    since = since.replace(minute=0, second=0, microsecond=0)
    ids = [a.id for a, _, _ in rows]
    for i in range(0, len(ids), 500):
        for b in s.exec(
            select(SpendBucket).where(
                col(SpendBucket.attempt_id).in_(ids[i : i + 500]), SpendBucket.hour >= since
            )
        ).all():
            out[(b.hour, b.attempt_id)] = b
    return out


def hold_for_budget(job: Job, rule: budgets.BudgetRule, reason: str, now: datetime) -> None:
    """HELD under `rule`, with the window and limit it was held in: the job is released when
    the window resets or the limit is raised (job.holds.BudgetHolds.hold_ends)."""
    job.state, job.reason, job.updated_at = JobState.HELD, reason, now
    job.held_budget = rule.name
    job.held_window_start = budgets.window_start(rule.window, now)
    job.held_limit_usd = rule.limit_usd


def request_stop(s: Session, a: Attempt, reason: str, now: datetime) -> None:
    """Record that an attempt must stop; the StopController makes the cloud calls."""
    if a.stop_requested_at is not None or a.state is AttemptState.ENDED:
        return
    a.stop_requested_at, a.stop_reason = now, reason
    if a.instance_id is not None:
        a.state = AttemptState.STOPPING
    s.add(a)
