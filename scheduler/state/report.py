"""`spotwise report`: what was paid against what on-demand would have cost, per job, team, cloud.

Three layers, so the arithmetic is testable without a database or a cloud:
- `load` reads the database (attempts, the hourly spend ledger, price history) into `Facts`;
- `ondemand_offerings` asks the configured providers what on-demand offerings exist now;
- `build` is pure: facts + offerings + budget rules -> a `Report` (rows, totals, the series
  the HTML plots, and the footnotes that say how each figure was computed).

Definitions (also printed as the report's footnotes):
- cost_usd is what was paid: the spend ledger (SpendBucket) budgets sum, at the prices paid;
- an attempt's hours are its paid time (started_at to accrued_until, else ended_at, else now);
- lost_hours: no checkpoint times are recorded per attempt, so the last
  min(attempt hours, the job's checkpoint_interval) of each INTERRUPTED attempt is lost (the
  trainer checkpoints every interval, so at most that much work is redone);
- useful_hours = hours - lost_hours; ondemand_usd = useful_hours x the price of the cheapest
  on-demand offering meeting the job's requirements among those listed at report time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

from providers.base import Market, Offering, Provider
from scheduler.core.budget import BudgetRule, Window, window_start
from scheduler.core.catalog import Catalog
from scheduler.core.jobspec import JobSpec, SpotPreference
from scheduler.core.placement import (
    DEFAULT_SPOT_INTERRUPTION_RATE,
    PlacementContext,
    Requirements,
    candidates,
)
from scheduler.core.states import AttemptEnd
from scheduler.state import calibration
from scheduler.state.calibration import PoolCalibration
from scheduler.state.models import Attempt, Job, PriceSample, SpendBucket
from trainer import contract

GROUPS = ("job", "team", "cloud")
CENT = 0.01  # below this an amount prints as $0.00: no percentage is made of it
HOUR = timedelta(hours=1)


# -- facts (what the database says) ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AttemptFact:
    attempt_id: str
    job_id: str
    job_name: str
    team: str
    cloud: str
    pool: str
    market: str
    gpu_count: int
    start: datetime
    end: datetime  # paid until
    end_reason: AttemptEnd | None
    ended_at: datetime | None


@dataclass(frozen=True, slots=True)
class BucketFact:
    hour: datetime
    attempt_id: str
    job_id: str
    job_name: str
    team: str
    cloud: str
    usd: float


@dataclass(frozen=True, slots=True)
class ReportWindow:
    """The report's time range, widened to whole UTC hours (the spend ledger's grain)."""

    start: datetime | None  # None: all time
    end: datetime

    def clip(self, a: datetime, b: datetime) -> float:
        """Hours of [a, b] inside the window."""
        lo = a if self.start is None else max(a, self.start)
        hi = min(b, self.end)
        return max(0.0, (hi - lo).total_seconds() / 3600.0)

    def contains(self, t: datetime) -> bool:
        return (self.start is None or t >= self.start) and t <= self.end


@dataclass
class Facts:
    window: ReportWindow
    now: datetime
    attempts: list[AttemptFact] = field(default_factory=list)
    buckets: list[BucketFact] = field(default_factory=list)
    specs: dict[str, JobSpec | None] = field(default_factory=dict)  # job id -> its spec
    stores: dict[str, str] = field(default_factory=dict)  # job id -> its checkpoint URI
    # pool -> [(observed_at, $/h)], the last sample before the window first.
    prices: dict[str, list[tuple[datetime, float]]] = field(default_factory=dict)
    # Per budget window kind: spend per (job name, team) from that window's start (at the
    # report's start) up to the report's start, so the budget lines start where they stood.
    before: dict[Window, dict[tuple[str, str], float]] = field(default_factory=dict)
    calibration: list[PoolCalibration] = field(default_factory=list)


def floor_hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def report_window(since: datetime | None, until: datetime | None, now: datetime) -> ReportWindow:
    """[since, until] as the ledger sees it (the same buckets `spotwise cost` sums)."""
    start = floor_hour(since) if since is not None else None
    end = now if until is None else min(now, _ceil_hour(until))
    return ReportWindow(start, end)


def _ceil_hour(t: datetime) -> datetime:
    f = floor_hour(t)
    return f if f == t else f + HOUR


def _aware(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def load(
    engine: Engine,
    since: datetime | None,
    until: datetime | None,
    now: datetime,
    rules: Sequence[BudgetRule] = (),
    spot_prior: float = 0.1,
) -> Facts:
    """Everything `build` needs, in one read (no cloud I/O)."""
    w = report_window(since, until, now)
    facts = Facts(window=w, now=now)
    with Session(engine) as s:
        facts.calibration = calibration.load(s, spot_prior)
        q = (
            select(Attempt, Job.name, Job.team)
            .where(Attempt.job_id == Job.id, col(Attempt.started_at).is_not(None))
            .where(col(Attempt.started_at) < w.end)
        )
        if w.start is not None:
            q = q.where(
                col(Attempt.ended_at).is_(None)
                | (col(Attempt.ended_at) >= w.start)
                | (col(Attempt.accrued_until) >= w.start)
            )
        for a, name, team in s.exec(q).all():
            assert a.started_at is not None
            # Ended: billing stopped at its end; running: paid up to the last accrual.
            paid = a.ended_at or a.accrued_until or now
            facts.attempts.append(
                AttemptFact(
                    attempt_id=a.id,
                    job_id=a.job_id,
                    job_name=name,
                    team=team,
                    cloud=a.cloud,
                    pool=a.pool,
                    market=a.market,
                    gpu_count=a.gpu_count * a.nodes,  # a gang: every node's GPUs
                    start=a.started_at,
                    end=max(paid, a.started_at),
                    end_reason=a.end_reason,
                    ended_at=a.ended_at,
                )
            )
        bq = select(SpendBucket).where(col(SpendBucket.hour) < w.end)
        if w.start is not None:
            bq = bq.where(col(SpendBucket.hour) >= w.start)
        facts.buckets = [
            BucketFact(b.hour, b.attempt_id, b.job_id, b.job_name, b.team, b.cloud, b.usd)
            for b in s.exec(bq.order_by(col(SpendBucket.hour))).all()
        ]
        job_ids = sorted({a.job_id for a in facts.attempts})
        for k in range(0, len(job_ids), 500):  # bound the IN list (driver parameter limits)
            for jid, spec_json, uri in s.exec(
                select(Job.id, Job.spec_json, Job.checkpoint_uri).where(
                    col(Job.id).in_(job_ids[k : k + 500])
                )
            ).all():
                facts.specs[jid] = _spec(spec_json)
                facts.stores[jid] = uri
        spot_pools = sorted({a.pool for a in facts.attempts if a.market == Market.SPOT.value})
        for pool in spot_pools:
            facts.prices[pool] = _price_history(s, pool, w)
        if w.start is not None:
            for kind in {r.window for r in rules}:
                facts.before[kind] = _spend_before(s, kind, w.start)
    return facts


def _spec(spec_json: str) -> JobSpec | None:
    try:
        return JobSpec.model_validate_json(spec_json)
    except ValueError:
        return None  # written by another version: the job is reported without a comparison


def _price_history(s: Session, pool: str, w: ReportWindow) -> list[tuple[datetime, float]]:
    q = select(PriceSample.observed_at, PriceSample.price_per_hour).where(
        PriceSample.pool == pool, col(PriceSample.observed_at) <= w.end
    )
    points: list[tuple[datetime, float]] = []
    if w.start is not None:
        first = s.exec(
            q.where(col(PriceSample.observed_at) < w.start)
            .order_by(col(PriceSample.observed_at).desc())
            .limit(1)
        ).first()
        if first is not None:
            points.append((w.start, float(first[1])))
        q = q.where(col(PriceSample.observed_at) >= w.start)
    points += [
        (_aware(t), float(p)) for t, p in s.exec(q.order_by(col(PriceSample.observed_at))).all()
    ]
    return points


def _spend_before(s: Session, kind: Window, start: datetime) -> dict[tuple[str, str], float]:
    """Spend per (job name, team) in a budget window of `kind` before the report starts."""
    ws = window_start(kind, start)
    name, team = col(SpendBucket.job_name), col(SpendBucket.team)
    q = sa.select(name, team, func.sum(col(SpendBucket.usd))).where(col(SpendBucket.hour) < start)
    if ws is not None:
        if ws >= start:
            return {}
        q = q.where(col(SpendBucket.hour) >= ws)
    rows = s.execute(q.group_by(name, team)).all()
    return {(n, t): float(u or 0.0) for n, t, u in rows}


def ondemand_offerings(providers: Mapping[str, Provider]) -> tuple[list[Offering], list[str]]:
    """The on-demand offerings the configured `providers` list now, and one line per
    provider that could not be asked (its jobs are then compared only where others fit)."""
    found: list[Offering] = []
    problems: list[str] = []
    for name, provider in providers.items():
        try:
            offerings = provider.offerings()
        except Exception as e:  # one unreachable cloud does not stop the report
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            problems.append(f"{name}: on-demand prices unavailable ({first})")
            continue
        found += [o for o in offerings if o.market is Market.ON_DEMAND]
    return found, problems


# -- the report (pure) ----------------------------------------------------------------------
@dataclass
class Row:
    key: str
    name: str = ""  # the job's name (by job)
    team: str = ""  # the job's team (by job)
    budgets: list[str] = field(default_factory=list)  # team-scoped budgets (by team)
    cost_usd: float = 0.0
    ondemand_usd: float = 0.0
    unpriced_hours: float = 0.0  # useful hours with no adequate on-demand offering listed
    interruptions: int = 0
    hours: float = 0.0
    lost_hours: float = 0.0
    gpu_hours: float = 0.0
    job_ids: set[str] = field(default_factory=set)

    @property
    def useful_hours(self) -> float:
        return self.hours - self.lost_hours

    @property
    def savings_usd(self) -> float | None:
        """None when some useful hours had no on-demand price to compare with."""
        return None if self.unpriced_hours > 1e-9 else self.ondemand_usd - self.cost_usd

    @property
    def savings_pct(self) -> float | None:
        """None where a percentage would mislead: no comparison, or an amount under a cent
        on either side ($0.004 against $0.02 is not '82% saved')."""
        sav = self.savings_usd
        if sav is None or min(self.ondemand_usd, self.cost_usd) < CENT:
            return None
        return 100.0 * sav / self.ondemand_usd

    def to_dict(self, by: str) -> dict[str, Any]:
        out: dict[str, Any] = {by: self.key} if by else {}
        if by == "job":
            out |= {"name": self.name, "team": self.team}
        if by == "team":
            out["budgets"] = sorted(self.budgets)
        sav, pct = self.savings_usd, self.savings_pct
        return out | {
            "cost_usd": round(self.cost_usd, 6),
            "ondemand_usd": round(self.ondemand_usd, 6),
            "savings_usd": None if sav is None else round(sav, 6),
            "savings_pct": None if pct is None else round(pct, 2),
            "interruptions": self.interruptions,
            "hours": round(self.hours, 6),
            "lost_hours": round(self.lost_hours, 6),
            "useful_hours": round(self.useful_hours, 6),
            "unpriced_hours": round(self.unpriced_hours, 6),
            "gpu_hours": round(self.gpu_hours, 6),
            "jobs": len(self.job_ids),
        }


def store_url(uri: str) -> str | None:
    """Where a person looks at a checkpoint store: the cloud console's page of an s3:// or
    gs:// prefix, the blob endpoint of an az:// one (the portal's page needs the account's
    resource group, which the URI does not name), the file:// URI of a local one."""
    from urllib.parse import quote

    try:
        loc = contract.parse_uri(uri)
    except ValueError:
        return None
    if loc.is_local:
        return contract.canonical_uri(uri) if loc.path and loc.path.is_absolute() else None
    prefix = quote(loc.prefix + "/" if loc.prefix else "")
    if loc.scheme == "s3":
        return f"https://s3.console.aws.amazon.com/s3/buckets/{loc.bucket}?prefix={prefix}"
    if loc.scheme == "gs":
        return f"https://console.cloud.google.com/storage/browser/{loc.bucket}/{prefix}"
    if not loc.account:
        return None
    return f"https://{loc.account}.blob.core.windows.net/{loc.bucket}/{prefix}"


@dataclass(frozen=True, slots=True)
class OnDemandChoice:
    job_id: str
    job_name: str
    offering: Offering | None  # None: nothing listed meets the job's requirements
    checkpoint_uri: str = ""  # where the job's checkpoints are (the report links to them)


@dataclass(frozen=True, slots=True)
class BudgetSeries:
    rule: BudgetRule
    points: list[tuple[datetime, float]]  # cumulative spend in the budget's window


@dataclass(frozen=True, slots=True)
class Span:
    """One attempt on the timeline (clipped to the window)."""

    job_label: str
    start: datetime
    end: datetime
    market: str
    interrupted_at: datetime | None


@dataclass
class Report:
    by: str
    since: datetime | None
    until: datetime | None
    window: ReportWindow
    generated_at: datetime
    rows: list[Row]
    total: Row
    ondemand: list[OnDemandChoice]
    budgets: list[BudgetSeries]
    prices: dict[str, list[tuple[datetime, float]]]
    timeline: list[Span]
    notes: list[str]
    first_activity: datetime | None = None  # the earliest spend or attempt in the window
    calibration: list[PoolCalibration] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        total = self.total.to_dict("")
        return {
            "by": self.by,
            "since": self.since,
            "until": self.until,
            "window": {"start": self.window.start, "end": self.window.end},
            "generated_at": self.generated_at,
            "total": total,
            "rows": [r.to_dict(self.by) for r in self.rows],
            "ondemand_basis": [
                {
                    "job": c.job_id,
                    "name": c.job_name,
                    "pool": c.offering.pool if c.offering else None,
                    "price_per_hour": c.offering.price_per_hour if c.offering else None,
                    "checkpoint_uri": c.checkpoint_uri,
                    "checkpoint_url": store_url(c.checkpoint_uri),
                }
                for c in self.ondemand
            ],
            "notes": self.notes,
            "calibration": [c.to_dict() for c in self.calibration],
        }


def cheapest_ondemand(spec: JobSpec | None, catalog: Catalog, now: datetime) -> Offering | None:
    """The cheapest on-demand offering meeting the job's hardware, cloud and region
    requirements (its max price and spot preference are choices, not requirements)."""
    if spec is None or len(catalog) == 0:
        return None
    req = dataclasses.replace(
        Requirements.from_spec(spec), spot=SpotPreference.NEVER, max_price_per_hour=None
    )
    rows, _ = candidates(req, catalog, PlacementContext(now=now))
    if len(rows) == 0:
        return None
    return catalog.offering(int(rows[int(np.argmin(catalog.price[rows]))]))


def lost_hours(a: AttemptFact, spec: JobSpec | None, w: ReportWindow) -> float:
    """Hours of an interrupted attempt's work redone after it: its last checkpoint interval."""
    if a.end_reason is not AttemptEnd.INTERRUPTED:
        return 0.0
    interval = (
        spec.interval_at(DEFAULT_SPOT_INTERRUPTION_RATE)
        if spec is not None
        else timedelta(minutes=10)
    )
    return w.clip(max(a.start, a.end - interval), a.end)


def build(
    facts: Facts,
    ondemand: Iterable[Offering],
    rules: Sequence[BudgetRule],
    by: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    problems: Sequence[str] = (),
) -> Report:
    if by not in GROUPS:
        raise ValueError(f"by must be one of {', '.join(GROUPS)}")
    w, now = facts.window, facts.now
    catalog = Catalog([o for o in ondemand if o.market is Market.ON_DEMAND])
    rows: dict[str, Row] = {}
    total = Row("total")

    def row(key: str) -> Row:
        return rows.setdefault(key, Row(key))

    choices: dict[str, OnDemandChoice] = {}
    for a in facts.attempts:
        spec = facts.specs.get(a.job_id)
        if a.job_id not in choices:
            choices[a.job_id] = OnDemandChoice(
                a.job_id,
                a.job_name,
                cheapest_ondemand(spec, catalog, now),
                facts.stores.get(a.job_id, ""),
            )
        offer = choices[a.job_id].offering
        hours = w.clip(a.start, a.end)
        lost = lost_hours(a, spec, w)
        gpus = a.gpu_count or (spec.gpu_specs()[0].count if spec is not None else 0)
        interrupted = a.end_reason is AttemptEnd.INTERRUPTED and w.contains(a.ended_at or a.end)
        key = {"job": a.job_id, "team": a.team, "cloud": a.cloud}[by]
        for r in (row(key), total):
            r.hours += hours
            r.lost_hours += lost
            r.gpu_hours += hours * gpus
            r.interruptions += int(interrupted)
            if a.end_reason is AttemptEnd.FAILED:
                pass  # failed work saved nothing: its cost counts, no on-demand equivalent
            elif offer is not None:
                r.ondemand_usd += (hours - lost) * offer.price_per_hour
            else:
                r.unpriced_hours += hours - lost
            if hours > 0:
                r.job_ids.add(a.job_id)
            if by == "job":
                r.name, r.team = (a.job_name, a.team) if r is not total else ("", "")
    for b in facts.buckets:
        key = {"job": b.job_id, "team": b.team, "cloud": b.cloud}[by]
        for r in (row(key), total):
            r.cost_usd += b.usd
            r.job_ids.add(b.job_id)
            if by == "job" and r is not total and not r.name:
                r.name, r.team = b.job_name, b.team
    if by == "team":
        for rule in rules:
            kind, _, team = rule.scope.partition(":")
            if kind == "team":
                row(team).budgets.append(rule.name)  # a budgeted team appears even if idle
    ordered = sorted(rows.values(), key=lambda r: (-r.cost_usd, r.key))
    notes = _notes(facts, choices.values(), total, problems)
    return Report(
        by=by,
        since=since,
        until=until,
        window=w,
        generated_at=now,
        rows=ordered,
        total=total,
        ondemand=sorted(choices.values(), key=lambda c: c.job_name),
        budgets=[budget_series(r, facts) for r in rules],
        prices=facts.prices,
        timeline=(timeline := _timeline(facts)),
        notes=notes,
        first_activity=min(
            [b.hour for b in facts.buckets] + [s.start for s in timeline], default=None
        ),
        calibration=facts.calibration,
    )


def budget_series(rule: BudgetRule, facts: Facts) -> BudgetSeries:
    """The rule's spend within its own window (reset at each window start), hour by hour."""
    w = facts.window
    before = facts.before.get(rule.window, {})
    cum = sum(v for (name, team), v in before.items() if rule.applies_to(name, team))
    hourly: dict[datetime, float] = {}
    for b in facts.buckets:
        if rule.applies_to(b.job_name, b.team):
            hourly[b.hour] = hourly.get(b.hour, 0.0) + b.usd
    first = w.start if w.start is not None else (min(hourly) if hourly else w.end)
    points = [(first, cum)]
    current = window_start(rule.window, first)
    for hour in sorted(hourly):
        ws = window_start(rule.window, hour)
        if ws != current:  # a new budget window: spend starts again from zero
            points += [(ws, points[-1][1]), (ws, 0.0)] if ws is not None else []
            cum, current = 0.0, ws
        points.append((hour, cum))
        cum += hourly[hour]
        points.append((min(hour + HOUR, w.end), cum))
    points.append((w.end, cum))
    return BudgetSeries(rule, points)


def _timeline(facts: Facts) -> list[Span]:
    w = facts.window
    spans = []
    for a in sorted(facts.attempts, key=lambda a: (a.start, a.attempt_id)):
        if w.clip(a.start, a.end) <= 0 and a.end_reason is not AttemptEnd.INTERRUPTED:
            continue
        start = a.start if w.start is None else max(a.start, w.start)
        end = min(a.end, w.end)
        hit = a.ended_at or a.end
        interrupted = hit if a.end_reason is AttemptEnd.INTERRUPTED and w.contains(hit) else None
        spans.append(Span(f"{a.job_name} ({a.job_id[:8]})", start, end, a.market, interrupted))
    return spans


def _notes(
    facts: Facts, choices: Iterable[OnDemandChoice], total: Row, problems: Sequence[str]
) -> list[str]:
    notes = [
        "Cost is what was paid: the hourly spend ledger budgets sum, at the prices actually "
        "paid; the window is widened to whole UTC hours (the ledger's grain), as in "
        "`spotwise cost`.",
        "On-demand is what the same useful hours would have cost on the cheapest on-demand "
        "offering meeting each job's requirements (GPUs, CPUs, memory, clouds, regions; not "
        "its max price) among those the configured providers list now, at report time, not "
        "at the prices of the hours when they ran.",
        "Useful hours leave out hours lost to interruptions: spotwise records no checkpoint "
        "times per attempt, so the last min(attempt hours, the job's checkpoint_interval) of "
        "each interrupted attempt is counted as lost (work since the trainer's last periodic "
        "checkpoint); hours of attempts that were cancelled or migrated count as useful, "
        "hours of attempts that failed have no on-demand equivalent (failed work saved "
        "nothing; what it cost still counts). Savings = on-demand - cost; no percentage is "
        "shown where either amount is under a cent.",
    ]
    unpriced = sorted(c.job_name for c in choices if c.offering is None)
    if unpriced:
        notes.append(
            f"No listed on-demand offering meets the requirements of {', '.join(unpriced)}: "
            f"their {total.unpriced_hours:.2f} useful hours have no comparison, so savings "
            "are left out where they count."
        )
    return notes + list(problems)
