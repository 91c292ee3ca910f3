"""Budget holds: when a waiting job is HELD under a hard budget, and when it is let go.

A job is held in two ways: a budget stop ends its attempt (lifecycle.next_state makes it
HELD), or placement finds that a hard budget cannot pay for any adequate offering from what
is left of it (a job that merely waits for another job's reserved burn to free up is not
held). Either way it is held with the budget's window and limit, and released when the
window resets or the limit is raised (or the budget is removed), so it neither churns at
the limit nor waits forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlmodel import Session

from scheduler.core import budget as budgets
from scheduler.core.config import Config
from scheduler.core.placement import PlacementContext, Requirements, place
from scheduler.core.states import JobState
from scheduler.daemon.controllers.base import Db
from scheduler.daemon.controllers.job.snapshot import PassFacts
from scheduler.daemon.controllers.job.writes import Hold
from scheduler.daemon.controllers.rows import live_job_ids
from scheduler.daemon.controllers.spend import hold_for_budget
from scheduler.state.audit import emit, event
from scheduler.state.models import Job


class BudgetHolds:
    def __init__(self, db: Db, config: Callable[[], Config]) -> None:
        self.db = db
        self._config = config

    def _rules(self) -> dict[str, budgets.BudgetRule]:
        return {r.name: r for r in self._config().budget_rules()}

    def hold_ends(
        self, job: Job, now: datetime, rules: dict[str, budgets.BudgetRule] | None = None
    ) -> bool:
        """Whether the budget that holds `job` has a new window or limit (or is gone)."""
        if rules is None:
            rules = self._rules()
        rule = rules.get(job.held_budget or "")
        if rule is not None and rule.hard:
            same_window = budgets.window_start(rule.window, now) == job.held_window_start
            if same_window and rule.limit_usd <= (job.held_limit_usd or 0.0):
                return False
        return True

    def release(self, job_id: str, now: datetime) -> None:
        """A budget-HELD job waits until that budget's window resets or its limit is raised
        (or it is removed): then, judged again in the write, it waits to be placed."""
        rules = self._rules()
        with self.db.write() as s:
            job = s.get(Job, job_id)
            if job is None or job.state is not JobState.HELD:
                return
            if not self.hold_ends(job, now, rules):
                return
            job.state = JobState.RECOVERING if job.recoveries else JobState.PENDING
            job.reason = f"budget '{job.held_budget}' has a new window or limit"
            job.held_budget = job.held_window_start = job.held_limit_usd = None
            job.updated_at = now
            s.add(job)
            emit(s, now, "released", job.reason, job_id=job.id)

    def write(
        self, s: Session, holds: list[Hold], jobs: dict[str, Job], events: list[dict[str, Any]]
    ) -> None:
        """HELD under the budget, with its window and limit (released, as a budget stop's
        hold is, when the window resets or the limit is raised), if the job still waits."""
        rules = self._rules()
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


def budget_to_hold_under(
    job: Job, req: Requirements, ctx: PlacementContext, facts: PassFacts
) -> str | None:
    """The hard budget to hold a job under that it cannot pay from what is left of it,
    None if the job should wait instead: another job's reserved burn is what blocks
    (it frees up when that job ends), or something besides the budget does. A waiting
    job was left waiting forever in a total window (the kill -9 campaign found one,
    RECOVERING after its attempt was lost with most of the budget spent)."""
    if ctx.max_affordable_price is None:
        return None
    cap, name = budgets.max_affordable_price(
        facts.statuses,
        job.name,
        job.team,
        facts.hold_hours,
        count_burn=False,
        user=job.submitted_by,
    )
    if cap is None:
        return None
    cat, memo = facts.catalog, facts.memo
    if not place(req, cat, replace(ctx, max_affordable_price=None), memo).placed:
        return None  # the budget is not what blocks (the cheap check, first)
    # any adequate offering the remainder could pay: in any market (a deadline policy
    # may ask for on-demand now, spot later) and in pools now backing off
    anywhere = replace(ctx, markets=None, spot_zones=None, unavailable={}, avoid_pools=frozenset())
    if place(req, cat, replace(anywhere, max_affordable_price=cap), memo).placed:
        return None
    return name
