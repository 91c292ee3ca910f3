"""Accrues spend per attempt from the price paid and enforces budgets."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, select

from scheduler import budget as budgets
from scheduler.audit import emit
from scheduler.controllers.base import LIVE, ControllerBase
from scheduler.models import Attempt, AttemptState, BudgetSpend, Job, JobState


class SpendController(ControllerBase):
    def _spends(self, s: Session) -> list[budgets.Spend]:
        rows = s.exec(select(Attempt, Job).where(Attempt.job_id == Job.id)).all()
        # Launching attempts (intent written, not billed yet) reserve their burn; attempts that
        # ended without ever starting cost nothing.
        return [
            budgets.Spend(j.name, j.team, a.price_per_hour, a.started_at, a.ended_at)
            for a, j in rows
            if a.started_at is not None or a.state is not AttemptState.ENDED
        ]

    def _budget_statuses(self) -> list[budgets.BudgetStatus]:
        now = self.clock.now()
        with self._session() as s:
            spends = self._spends(s)
        return [budgets.status(rule, spends, now) for rule in self.config.budget_rules()]

    def accrue(self) -> None:
        """Accrue spend on running attempts, publish budget state and enforce hard budgets."""
        with self._lock:
            now = self.clock.now()
            with self._session() as s:
                running = s.exec(
                    select(Attempt).where(Attempt.state.in_(LIVE), Attempt.started_at.is_not(None))
                ).all()
                touched: set[str] = set()
                for a in running:
                    a.cost_usd = self._attempt_cost(a, now)
                    s.add(a)
                    touched.add(a.job_id)
                for job_id in touched:
                    job = s.get(Job, job_id)
                    if job is not None:
                        job.cost_usd = self._job_cost(s, job_id, now)
                        s.add(job)
                s.commit()
                spends = self._spends(s)
                hold = self._hold_hours()
                for rule in self.config.budget_rules():
                    st = budgets.status(rule, spends, now)
                    before, after = self._publish_budget(s, st, now)
                    if budgets.must_stop(st, hold):
                        self._stop_for_budget(s, st, now)
                    elif budgets.soft_exceeded(st) and before != after:
                        msg = (
                            f"soft budget '{rule.name}' spent ${st.spent:.2f} "
                            f"of ${rule.limit_usd:.2f}"
                        )
                        emit(s, now, "budget_warning", msg, level="warning")
                s.commit()

    def _publish_budget(
        self, s: Session, st: budgets.BudgetStatus, now: datetime
    ) -> tuple[str, str]:
        """Materialise the budget's spend for the CLI; returns its state before and after."""
        rule = st.rule
        row = s.get(BudgetSpend, rule.name) or BudgetSpend(name=rule.name)
        before = row.state
        if st.exhausted:
            state = "exhausted"
        elif st.spent > 0.8 * rule.limit_usd:
            state = "warning"
        else:
            state = "ok"
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
        return before, row.state

    def _stop_for_budget(self, s: Session, st: budgets.BudgetStatus, now: datetime) -> None:
        rows = s.exec(
            select(Attempt, Job).where(
                Attempt.job_id == Job.id,
                Attempt.state.in_((AttemptState.LAUNCHING, AttemptState.RUNNING)),
            )
        ).all()
        for a, job in rows:
            if not st.rule.applies_to(job.name, job.team):
                continue
            why = (
                f"hard budget '{st.rule.name}' (${st.rule.limit_usd:.2f}/{st.rule.window.value}) "
                f"would be exceeded: ${st.spent:.2f} spent"
            )
            self._request_stop(s, a, "budget", now)
            job.state, job.reason, job.updated_at = JobState.HELD, why, now
            job.held_budget = st.rule.name
            job.held_window_start = budgets.window_start(st.rule.window, now)
            job.held_limit_usd = st.rule.limit_usd
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
