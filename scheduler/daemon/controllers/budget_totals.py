"""Each budget's accrued spend in its current window, kept as a running total.

A budget's status used to be a SUM over its window's spend buckets, recomputed at every
accrual, pass and settle under the write lock: its cost grew with history (141 ms a call at
a million buckets). Every bucket change now goes through a `Ledger`, and the transaction
that changes buckets adds its ledger to each budget's total (`BudgetSpend.accrued_usd`), so
reading a status costs one row. `accrued_key` names what the total covers (scope, window,
the window's start): a new window, a budget added or a scope changed rebuilds it once, from
the buckets of a calendar window or from the attempts' costs for a `total` one (buckets have
a retention; attempts are kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlmodel import Session, col, func, select

from scheduler.core import budget as budgets
from scheduler.state.models import Attempt, BudgetSpend, Job, SpendBucket


class Ledger:
    """What one transaction added to the spend buckets (refunds negative), by job, its name,
    team and hour: what the budgets' running totals must add in the same transaction."""

    def __init__(self) -> None:
        self.added: dict[tuple[str, str, str, datetime], float] = {}

    def add(self, job_id: str, job_name: str, team: str, hour: datetime, usd: float) -> None:
        key = (job_id, job_name, team, hour)
        self.added[key] = self.added.get(key, 0.0) + usd

    def job_ids(self) -> set[str]:
        return {job_id for job_id, _, _, _ in self.added}

    def total_for(
        self, rule: budgets.BudgetRule, since: datetime | None, users: Mapping[str, str]
    ) -> float:
        """What this transaction added in `rule`'s scope since `since`; `users` is who
        submitted each job (job id -> Unix user), for `user:NAME` scopes."""
        return sum(
            usd
            for (job_id, name, team, hour), usd in self.added.items()
            if rule.applies_to(name, team, users.get(job_id, ""))
            and (since is None or hour >= since)
        )


def window_key(rule: budgets.BudgetRule, now: datetime) -> str:
    start = budgets.window_start(rule.window, now)
    return f"{rule.scope}|{rule.window.value}|{start.isoformat() if start else 'total'}"


def rebuilt(s: Session, rule: budgets.BudgetRule, now: datetime) -> float:
    """The rule's accrued spend in its current window, from scratch: the window's buckets,
    or (a `total` window) the costs of every attempt it covers."""
    start = budgets.window_start(rule.window, now)
    kind, _, value = rule.scope.partition(":")
    if start is None:
        q = select(func.coalesce(func.sum(Attempt.cost_usd), 0.0)).where(Attempt.job_id == Job.id)
        if kind == "team":
            q = q.where(Job.team == value)
        elif kind == "job":
            q = q.where(Job.name == value)
        elif kind == "user":
            q = q.where(Job.submitted_by == value)
        return float(s.exec(q).one())
    b = select(func.coalesce(func.sum(SpendBucket.usd), 0.0)).where(col(SpendBucket.hour) >= start)
    if kind == "team":
        b = b.where(SpendBucket.team == value)
    elif kind == "job":
        b = b.where(SpendBucket.job_name == value)
    elif kind == "user":  # the jobs this user submitted (the bucket names the job)
        b = b.where(col(SpendBucket.job_id).in_(select(Job.id).where(Job.submitted_by == value)))
    return float(s.exec(b).one())


def accrued(
    s: Session, rule: budgets.BudgetRule, now: datetime, rows: dict[str, BudgetSpend]
) -> float:
    """The rule's accrued spend in its window: its running total when that covers this
    window, else rebuilt (the first read after a new window or a changed rule, until the
    next accrual keeps it)."""
    row = rows.get(rule.name)
    if row is not None and row.accrued_key == window_key(rule, now):
        return row.accrued_usd
    return rebuilt(s, rule, now)


def apply(s: Session, rules: Iterable[budgets.BudgetRule], ledger: Ledger, now: datetime) -> None:
    """Add what this transaction billed to each budget's running total (rebuilding a total
    that covers another window or rule), in the same transaction as the buckets."""
    rules = list(rules)
    users: dict[str, str] = {}
    if ledger.added and any(r.scope.startswith("user:") for r in rules):
        ids = sorted(ledger.job_ids())
        users = {
            job_id: user or ""
            for job_id, user in s.exec(
                select(Job.id, Job.submitted_by).where(col(Job.id).in_(ids))
            ).all()
        }
    for rule in rules:
        key = window_key(rule, now)
        row = s.get(BudgetSpend, rule.name)
        if row is None:
            row = BudgetSpend(
                name=rule.name,
                scope=rule.scope,
                window=rule.window.value,
                limit_usd=rule.limit_usd,
                hard=rule.hard,
                updated_at=now,
            )
        if row.accrued_key != key:
            s.flush()  # this transaction's buckets and costs count in the rebuild
            row.accrued_usd, row.accrued_key = rebuilt(s, rule, now), key
        else:
            start = budgets.window_start(rule.window, now)
            delta = ledger.total_for(rule, start, users)
            if delta:
                row.accrued_usd = round(row.accrued_usd + delta, 9)
        s.add(row)


def budget_rows(s: Session) -> dict[str, BudgetSpend]:
    return {r.name: r for r in s.exec(select(BudgetSpend)).all()}


__all__ = ["Ledger", "accrued", "apply", "budget_rows", "rebuilt", "window_key"]
