"""Prometheus metrics for the daemon (served on [daemon] metrics_port, loopback by default)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from sqlalchemy.engine import Engine
from sqlmodel import Session, func, select

from scheduler.core.states import JobState
from scheduler.state.models import BudgetSpend, Job


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("spotwise_jobs", "Jobs by state", ["state"], registry=r)
        self.spent = Gauge("spotwise_budget_spent_usd", "Spend in window", ["budget"], registry=r)
        self.limit = Gauge("spotwise_budget_limit_usd", "Budget limit", ["budget"], registry=r)
        self.offerings = Gauge("spotwise_offerings", "Offerings in the catalog", registry=r)
        self.task_seconds = Histogram(
            "spotwise_task_seconds", "Duration of daemon tasks", ["task"], registry=r
        )
        self.task_errors = Counter(
            "spotwise_task_errors", "Daemon task runs that raised", ["task"], registry=r
        )

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def refresh(self, engine: Engine, offerings: int) -> None:
        with Session(engine) as s:
            # An aggregate: the idle daemon's cost must not grow with finished jobs.
            states = dict(s.exec(select(Job.state, func.count()).group_by(Job.state)).all())
            for st in JobState:
                self.jobs.labels(st.value).set(states.get(st, 0))
            for b in s.exec(select(BudgetSpend)).all():
                self.spent.labels(b.name).set(b.spent_usd)
                self.limit.labels(b.name).set(b.limit_usd)
        self.offerings.set(offerings)
