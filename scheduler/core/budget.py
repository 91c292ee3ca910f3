"""Budgets as pure arithmetic: windows, headroom, what may launch and what must stop.

Spend is accrued per attempt from the price actually paid. A hard budget is never overrun: the
daemon launches nothing that cannot run for at least one accrual interval (plus the time it takes
to stop) inside the headroom, and stops running work before the next interval would cross it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class Window(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TOTAL = "total"


def window_start(window: Window, now: datetime) -> datetime | None:
    """Start of the window containing `now` (UTC calendar), None for 'total'."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if window is Window.DAY:
        return day
    if window is Window.WEEK:
        return day - timedelta(days=day.weekday())
    if window is Window.MONTH:
        return day.replace(day=1)
    return None


def window_end(window: Window, now: datetime) -> datetime | None:
    """End of the window containing `now` (the next window's start), None for 'total'."""
    start = window_start(window, now)
    if start is None:
        return None
    if window is Window.DAY:
        return start + timedelta(days=1)
    if window is Window.WEEK:
        return start + timedelta(days=7)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


@dataclass(frozen=True, slots=True)
class BudgetRule:
    name: str
    scope: str  # "global" | "team:NAME" | "job:NAME" | "user:NAME" (who submitted)
    limit_usd: float
    window: Window = Window.MONTH
    hard: bool = True

    def applies_to(self, job_name: str, team: str, user: str = "") -> bool:
        """Whether a job (its name, team and who submitted it) is in this budget's scope."""
        if self.scope == "global":
            return True
        kind, _, value = self.scope.partition(":")
        return (
            (kind == "team" and value == team)
            or (kind == "job" and value == job_name)
            or (kind == "user" and bool(user) and value == user)
        )


@dataclass(frozen=True, slots=True)
class Spend:
    """One attempt's paid time: price x (end - start); end None = still running (or launching)."""

    job_name: str
    team: str
    price_per_hour: float
    start: datetime | None  # None: launching, not billed yet, but its burn is reserved
    end: datetime | None


def spent_in_window(rule: BudgetRule, spends: Iterable[Spend], now: datetime) -> float:
    """USD paid inside the rule's current window by the jobs it covers (running ones up to now)."""
    start = window_start(rule.window, now)
    total = 0.0
    for s in spends:
        if s.start is None or not rule.applies_to(s.job_name, s.team):
            continue
        a = s.start if start is None else max(s.start, start)
        b = min(s.end or now, now)
        if b > a:
            total += s.price_per_hour * (b - a).total_seconds() / 3600.0
    return total


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    rule: BudgetRule
    spent: float
    burn_per_hour: float  # price per hour of the running attempts it covers

    @property
    def headroom(self) -> float:
        return max(0.0, self.rule.limit_usd - self.spent)

    def projected(self, hours: float) -> float:
        return self.spent + self.burn_per_hour * hours

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.rule.limit_usd


def status(rule: BudgetRule, spends: Sequence[Spend], now: datetime) -> BudgetStatus:
    burn = sum(
        s.price_per_hour for s in spends if s.end is None and rule.applies_to(s.job_name, s.team)
    )
    return BudgetStatus(rule, spent_in_window(rule, spends, now), burn)


def max_affordable_price(
    statuses: Iterable[BudgetStatus],
    job_name: str,
    team: str,
    hold_hours: float,
    count_burn: bool = True,
    user: str = "",
) -> tuple[float | None, str]:
    """Highest $/h a new attempt may cost so every hard budget covering it survives `hold_hours`.

    `hold_hours` is one accrual interval plus the time to stop (checkpoint) a job: the least time
    a launched attempt will certainly be paid for before the daemon can react. Without
    `count_burn`, the headroom other running attempts reserve is counted as free (it frees up
    when they end): what the budget could pay from what is left of it alone.
    Returns (None, "") when no hard budget applies.
    """
    best: float | None = None
    name = ""
    for st in statuses:
        if not st.rule.hard or not st.rule.applies_to(job_name, team, user):
            continue
        burn = st.burn_per_hour if count_burn else 0.0
        room = st.rule.limit_usd - st.spent - burn * hold_hours
        price = max(0.0, room) / hold_hours
        if best is None or price < best:
            best, name = price, st.rule.name
    return best, name


def must_stop(st: BudgetStatus, hold_hours: float) -> bool:
    """A hard budget whose running attempts would cross the limit within `hold_hours`."""
    return st.rule.hard and st.burn_per_hour > 0 and st.projected(hold_hours) > st.rule.limit_usd


def soft_exceeded(st: BudgetStatus) -> bool:
    return not st.rule.hard and st.spent > st.rule.limit_usd


def limit_reached_at(
    spent: float, burn_per_hour: float, limit: float, now: datetime, end: datetime | None
) -> datetime | None:
    """When a budget's spend reaches its limit if `burn_per_hour` goes on: None when it
    does not within the window (it ends at `end`; None: a total window, no end), or when
    nothing burns. A budget already at its limit reached it `now`."""
    if spent >= limit:
        return now
    if burn_per_hour <= 0:
        return None
    at = now + timedelta(hours=(limit - spent) / burn_per_hour)
    return at if end is None or at < end else None


def thresholds_crossed(spent: float, limit: float, percents: Iterable[float]) -> list[float]:
    """The alert thresholds (percents of the limit) that `spent` has reached."""
    if limit <= 0:
        return []
    share = 100.0 * spent / limit
    return sorted(p for p in percents if share >= p - 1e-9)
