"""A running gang that loses nodes: replace them and keep the others, or re-place it whole.

Two halves, each the intent before the cloud call:

- `on_loss`, called by the InstanceController inside the transaction in which it learns that
  nodes of a running gang were taken back or got the notice. It asks the pure decision
  (scheduler/core/gang_recovery.py), from the pool's learned hazard, its capacity now, a
  node's boot time, the survivors' billing while they wait and the wait bound. "Replace"
  writes the round (GangRound) and one node row per replacement (LAUNCHING, no instance yet)
  and says so in an event; "whole" says why, and the caller stops the gang as before.
- `step`, once per pass, for every open round: the round is written to the checkpoint store
  (the survivors' wrappers wait for it, trainer.rendezvous), each replacement is launched
  with a deterministic token (a crash or a transient failure is retried with the same one,
  so the cloud returns the same instance) and recorded. A round whose nodes all run is
  resumed. One whose replacement no pool can take, that is not running within
  `[gangs] replace_wait`, or whose attempt is being stopped, is abandoned: the gang is
  stopped and placed again whole. A node that a replacement superseded (it got the notice
  and still runs) is terminated once the round has resumed, if the cloud has not taken it.

Billing stays per node at the price paid: the survivors bill while they wait, a replacement
from its own launch, at its own pool's price when it went to another pool (the same zone
and instance type, the other market).
One module, over 600 lines: the decision's inputs, the round's rows, the replacement's
launch and its settling are one state machine, and a step of it alone would hide the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from providers.base import (
    TAG_NODE,
    CapacityUnavailable,
    EndReason,
    Instance,
    LaunchRejected,
    LaunchRequest,
    Market,
    Provider,
    ResourceRef,
    SetupError,
    pool_key,
)
from providers.base import (
    FatalError as ProviderFatal,
)
from scheduler.core import budget as budgets
from scheduler.core import gang_recovery as decision
from scheduler.core.catalog import Catalog
from scheduler.core.clock import Clock
from scheduler.core.config import Config
from scheduler.core.jobspec import JobSpec, SpotPreference
from scheduler.core.lifecycle import PEER_STOP
from scheduler.core.placement import PlacementContext, place
from scheduler.core.placement import Requirements as PlacementRequirements
from scheduler.core.states import AttemptState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.controllers.base import (
    LIVE,
    CatalogHolder,
    Clouds,
    Db,
    Result,
    hours,
    later,
    launching,
    mark_unavailable,
    safe_message,
    terminating,
)
from scheduler.daemon.controllers.gang import current_rows, node_id, nodes_of, observe_node
from scheduler.daemon.controllers.launch.request import LaunchRequests
from scheduler.daemon.controllers.spend import SpendController, request_stop
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, AttemptInstance, GangRound, Job, PoolState
from trainer import rendezvous

log = logging.getLogger("spotwise.reconcile")

REPLACING, RESUMED, ABANDONED, WHOLE = "replacing", "resumed", "abandoned", "whole"
PRIOR_HOURS = 10.0  # weight of the interruption prior, as the placement pass weighs it


def replacement_token(a: Attempt, row: AttemptInstance) -> str:
    """Deterministic per attempt, round, node and pool: a retry after a crash or a transient
    error asks the cloud for the same instance; a move to the fallback pool is a new one."""
    base = f"{a.token}-r{row.round}-n{row.node}"
    return base if not row.pool else f"{base}-{row.pool.rsplit('/', 1)[-1]}"


@dataclass(slots=True)
class _Open:
    """What a pass does for one open round, worked out before its cloud calls."""

    round: GangRound
    attempt: Attempt
    uri: str
    write_directive: bool = False
    launch: dict[str, tuple[LaunchRequest, AttemptInstance]] | None = None
    superseded: list[ResourceRef] | None = None


class GangRecovery:
    def __init__(
        self,
        db: Db,
        clock: Clock,
        clouds: Callable[[], Clouds],
        stores: CheckpointStores,
        catalog: CatalogHolder,
        config: Callable[[], Config],
        spend: SpendController,
    ) -> None:
        self.db = db
        self.clock = clock
        self._clouds = clouds
        self.stores = stores
        self.catalog = catalog
        self._config = config
        self.spend = spend
        self.requests = LaunchRequests(stores, catalog, config)

    # -- the decision, in the InstanceController's transaction ------------------------------
    def on_loss(
        self,
        s: Session,
        a: Attempt,
        rows: list[AttemptInstance],
        lost: list[AttemptInstance],
        now: datetime,
    ) -> bool:
        """Decide for `lost` (current rows of `a`, ended or noticed); True when replacing."""
        cfg = self._config()
        rounds = s.exec(select(GangRound).where(GangRound.attempt_id == a.id)).all()
        open_round = next((r for r in rounds if r.state == REPLACING), None)
        if open_round is not None:
            # A second loss while a replacement is under way (or the replacement itself
            # failed): the gang is re-placed whole rather than chasing it node by node.
            why = ", ".join(f"node {r.node} ({_what(r)})" for r in lost)
            self._abandon(s, a, open_round, f"{why} during round {open_round.round}", now)
            return False
        if a.state is not AttemptState.RUNNING:
            return False  # not whole yet: a gang launch stays all or nothing
        job = s.get(Job, a.job_id)
        if job is None:
            return False
        spec = JobSpec.model_validate_json(job.spec_json)
        rnd = 1 + max((r.round for r in rounds), default=0)
        pools = {p.pool: p for p in s.exec(select(PoolState)).all()}
        loss = self._loss(s, a, job, spec, rows, lost, pools, now)
        choice = decision.decide(loss, cfg.gangs.recovery)
        nodes = sorted(r.node for r in lost)
        gr = GangRound(
            id=f"{a.id}-r{rnd}",
            attempt_id=a.id,
            round=rnd,
            nodes=",".join(str(k) for k in nodes),
            lost=",".join(r.instance_id or "" for r in lost)[:500],
            state=REPLACING if choice.replace else WHOLE,
            reason=choice.reason[:500],
            decided_at=now,
        )
        rep = loss.replacement
        if not choice.replace or rep is None:
            gr.ended_at = now
            s.add(gr)
            emit(s, now, "gang_replace_whole", choice.reason, job_id=a.job_id, attempt_id=a.id,
                 level="warning")  # fmt: skip
            return False
        gr.pool, gr.price_per_hour = rep.pool, rep.price_per_hour
        gr.deadline = now + cfg.gangs.replace_wait
        s.add(gr)
        other = rep.pool != a.pool
        for r in lost:
            s.add(
                AttemptInstance(
                    id=node_id(a.id, r.node, rnd),
                    attempt_id=a.id,
                    node=r.node,
                    round=rnd,
                    region=a.region,
                    zone=a.zone,
                    state=AttemptState.LAUNCHING,
                    pool=rep.pool if other else "",
                    price_per_hour=rep.price_per_hour if other else None,
                )
            )
        self._learn(s, a, lost, pools, now)
        emit(s, now, "gang_replace", choice.reason, job_id=a.job_id, attempt_id=a.id,
             level="warning")  # fmt: skip
        return True

    def _loss(
        self,
        s: Session,
        a: Attempt,
        job: Job,
        spec: JobSpec,
        rows: list[AttemptInstance],
        lost: list[AttemptInstance],
        pools: dict[str, PoolState],
        now: datetime,
    ) -> decision.GangLoss:
        cfg = self._config()
        cat = self.catalog.catalog
        prior = cfg.policy.spot_interruption_prior
        rates = {
            p.pool: (p.interruptions + prior * PRIOR_HOURS) / (p.exposure_hours + PRIOR_HOURS)
            for p in pools.values()
            if p.interruptions or p.exposure_hours
        }

        def rate(pool: str) -> float:
            if pool.endswith(f"/{Market.ON_DEMAND.value}"):
                return 0.0
            return rates.get(pool, prior)

        price = a.billed_price or a.price_per_hour
        boot = hours(cfg.policy.restart_overhead)
        per_node = max(1, a.gpu_count) * a.nodes
        remaining = None
        if spec.gpu_hours:
            left = 1.0
            if job.total_steps and job.progress_step:
                left = max(0.0, 1 - job.progress_step / job.total_steps)
            remaining = spec.gpu_hours * left / per_node
        return decision.GangLoss(
            nodes=a.nodes,
            lost=len(lost),
            price_per_hour=price,
            hazard_per_hour=rate(a.pool),
            boot_hours=boot,
            drain_hours=hours(cfg.daemon.stop_grace),
            wait_bound_hours=hours(cfg.gangs.replace_wait),
            replacement=self._replacement(s, a, job, spec, cat, pools, len(lost), rate, now),
            elsewhere=self._elsewhere(a, spec, cat, pools, rates, price, rate, now),
            remaining_hours=remaining,
            lost_work_hours=hours(spec.interval_at(rate(a.pool))) / 2,
        )

    def _replacement(
        self,
        s: Session,
        a: Attempt,
        job: Job,
        spec: JobSpec,
        cat: Catalog,
        pools: dict[str, PoolState],
        k: int,
        rate: Callable[[str], float],
        now: datetime,
    ) -> decision.Replacement | None:
        """The gang's own pool if it can take a node now, else the other market of the same
        zone and instance type (what a placement group allows) if the job, its price cap and
        its hard budgets allow it; None when neither can."""
        owner = self.catalog.provider_of_pool

        def capacity(pool: str) -> float:
            offer = cat.offering_for_pool(pool)
            ps = pools.get(pool)
            if offer is None or owner.get(pool, a.provider) != a.provider:
                return 0.0
            if ps is not None and later(ps.unavailable_until, now):
                return 0.0
            if (
                ps is not None
                and ps.gang_capacity is not None
                and later(ps.gang_capacity_until, now)
                and ps.gang_capacity < a.nodes
            ):
                return decision.PARTIAL_CAPACITY
            return 1.0

        same = capacity(a.pool)
        offer = cat.offering_for_pool(a.pool)
        if same > 0 and offer is not None:
            return decision.Replacement(a.pool, offer.price_per_hour, same, rate(a.pool))
        market = Market.ON_DEMAND if a.market == Market.SPOT.value else Market.SPOT
        if (market is Market.SPOT and spec.spot is SpotPreference.NEVER) or (
            market is Market.ON_DEMAND and spec.spot is SpotPreference.ONLY
        ):
            return None
        pool = pool_key(a.cloud, a.zone, a.instance_type, market)
        other = cat.offering_for_pool(pool)
        if other is None or capacity(pool) <= 0:
            return None
        if spec.max_price_per_hour is not None and other.price_per_hour > spec.max_price_per_hour:
            return None  # the cap is per node, as placement reads it
        extra = max(0.0, other.price_per_hour - (a.billed_price or a.price_per_hour)) * k
        if extra > 0:
            affordable, _ = budgets.max_affordable_price(
                self.spend.statuses(s, now), job.name, job.team, self.spend.hold_hours()
            )
            if affordable is not None and extra > affordable:
                return None
        return decision.Replacement(pool, other.price_per_hour, capacity(pool), rate(pool))

    def _elsewhere(
        self,
        a: Attempt,
        spec: JobSpec,
        cat: Catalog,
        pools: dict[str, PoolState],
        rates: dict[str, float],
        price: float,
        rate: Callable[[str], float],
        now: datetime,
    ) -> decision.Elsewhere:
        """Where placement would put the whole gang now, avoiding the pool it lost nodes in
        (as it does after any interruption); the gang's own pool when nothing else fits."""
        cfg = self._config()
        req = replace(PlacementRequirements.from_spec(spec), nodes=a.nodes, min_nodes=None)
        unavailable = {
            p.pool: p.unavailable_until
            for p in pools.values()
            if p.unavailable_until is not None and p.unavailable_until > now
        }
        ctx = PlacementContext(
            now=now,
            unavailable=unavailable,  # type: ignore[arg-type]
            avoid_pools=frozenset({a.pool}),
            interruption_rate=rates,
            restart_overhead_hours=hours(cfg.policy.restart_overhead),
            lost_work_hours=hours(spec.interval_at(rate(a.pool))) / 2,
            gang_capacity=dict(self.catalog.current.request_limit),
        )
        d = place(req, cat, ctx)
        if d.offering is not None:
            o = d.offering
            return decision.Elsewhere(o.pool, o.price_per_hour, rate(o.pool))
        return decision.Elsewhere(
            a.pool, price, rate(a.pool), wait_hours=hours(cfg.daemon.unavailable_ttl)
        )

    @staticmethod
    def _learn(
        s: Session,
        a: Attempt,
        lost: list[AttemptInstance],
        pools: dict[str, PoolState],
        now: datetime,
    ) -> None:
        """A node taken back is an interruption of its pool, though the gang goes on (its
        exposure is counted when the gang ends)."""
        if a.market != Market.SPOT.value:
            return
        taken = [
            r for r in lost if r.notice_at is not None or r.end_reason == EndReason.INTERRUPTED
        ]
        if not taken:
            return
        ps = pools.get(a.pool) or PoolState(pool=a.pool)
        ps.interruptions += len(taken)
        ps.last_interrupted_at = now
        s.add(ps)

    def _abandon(self, s: Session, a: Attempt, gr: GangRound, why: str, now: datetime) -> None:
        """Give the round up: its replacements that never reached the cloud are dropped (no
        instance, no cost), and the gang is stopped to be re-placed whole."""
        _close_round(s, a, gr, why, now)
        if a.state in LIVE and a.stop_requested_at is None:
            request_stop(s, a, PEER_STOP, now)
        emit(
            s,
            now,
            "gang_replace_abandoned",
            f"round {gr.round}: {why}; re-placing the gang whole",
            job_id=a.job_id,
            attempt_id=a.id,
            level="warning",
        )

    # -- the pass -----------------------------------------------------------------------------
    def step(self) -> None:
        """Write, launch, record, resume or abandon every open round (see the module doc)."""
        now = self.clock.now()
        cfg = self._config()
        with self.db.read() as s:
            rounds = list(s.exec(select(GangRound).where(GangRound.state == REPLACING)).all())
            if not rounds:
                return
            ids = [r.attempt_id for r in rounds]
            attempts = {a.id: a for a in s.exec(select(Attempt).where(col(Attempt.id).in_(ids)))}
            uris = dict(
                s.exec(
                    select(Job.id, Job.checkpoint_uri).where(
                        col(Job.id).in_([a.job_id for a in attempts.values()])
                    )
                ).all()
            )
            specs = dict(
                s.exec(
                    select(Job.id, Job.spec_json).where(
                        col(Job.id).in_([a.job_id for a in attempts.values()])
                    )
                ).all()
            )
            nodes = nodes_of(s, ids)
        clouds = self._clouds()
        work: list[_Open] = []
        for gr in rounds:
            a = attempts.get(gr.attempt_id)
            if a is None:
                continue
            item = _Open(gr, a, uris.get(a.job_id, ""))
            work.append(item)
            if a.state not in LIVE or a.stop_requested_at is not None:
                continue  # closed in the write below
            rows = nodes.get(a.id, [])
            mine = [r for r in rows if r.round == gr.round]
            item.write_directive = gr.directive_at is None
            provider = clouds.get(a.provider)
            todo = [r for r in mine if r.instance_id is None and r.state is AttemptState.LAUNCHING]
            if provider is not None and todo:
                item.launch = {
                    r.id: (self._request(a, r, gr, specs.get(a.job_id, "{}"), provider), r)
                    for r in todo
                }
            if mine and all(r.state is AttemptState.RUNNING for r in mine):
                grace = gr.decided_at + cfg.daemon.stop_grace
                item.superseded = [
                    _ref(r)
                    for r in rows
                    if r.round < gr.round
                    and r.node in {m.node for m in mine}
                    and r.state is not AttemptState.ENDED
                    and r.instance_id
                    and now >= grace
                ]
        # The round first (store I/O, outside any transaction): survivors learn it before a
        # replacement can arrive for it.
        written: dict[str, str | None] = {}
        for item in work:
            if not item.write_directive:
                continue
            a, gr = item.attempt, item.round
            doc = rendezvous.round_doc(
                a.number, gr.round, a.nodes, [int(k) for k in gr.nodes.split(",") if k]
            )
            try:
                self.stores.write(item.uri, rendezvous.round_name(a.number), doc)
                written[gr.id] = None
            except StoreError as e:
                written[gr.id] = str(e)
        calls: dict[str, tuple[str, Callable[[Provider], Any]]] = {}
        for item in work:
            gr = item.round
            if item.write_directive and written.get(gr.id) is not None:
                item.launch = None  # not before the survivors can learn the round
            for row_id, (req, _) in (item.launch or {}).items():
                calls[row_id] = (item.attempt.provider, launching(req))
            if item.superseded:
                calls[f"{gr.id}/superseded"] = (item.attempt.provider, terminating(item.superseded))
        results = clouds.gather(calls) if calls else {}
        with self.db.write() as s:
            now = self.clock.now()
            for item in work:
                self._settle(s, item, written, results, now)

    def _request(
        self, a: Attempt, row: AttemptInstance, gr: GangRound, spec_json: str, p: Provider
    ) -> LaunchRequest:
        """The gang's own launch request, narrowed to one node of round `gr`: the same
        command, environment, tags and placement group, that node's rank and tag, the round,
        and the replacement's pool when it is not the gang's."""
        from scheduler.daemon.controllers.launch.request import JobView

        uri = ""
        job = JobView(a.job_id, spec_json, uri)
        with self.db.read() as s:
            j = s.get(Job, a.job_id)
            if j is not None:
                job = JobView(j.id, j.spec_json, j.checkpoint_uri)
        req = self.requests.build(job, a, p)
        env = dict(req.env)
        env[rendezvous.ENV_RDZV_ROUND] = str(gr.round)
        tags = dict(req.tags)
        tags[TAG_NODE] = p.capabilities.label(str(row.node))
        offering = req.offering
        if row.pool:
            other = self.catalog.catalog.offering_for_pool(row.pool)
            if other is not None:
                offering = other
        return replace(
            req,
            token=replacement_token(a, row),
            offering=offering,
            env=env,
            tags=tags,
            count=1,
            gang_node=row.node,
        )

    def _settle(
        self,
        s: Session,
        item: _Open,
        written: dict[str, str | None],
        results: Mapping[str, Result[Any]],
        now: datetime,
    ) -> None:
        """What one round's pass came to, written down (re-read: the pass may be late)."""
        cfg = self._config()
        gr = s.get(GangRound, item.round.id)
        a = s.get(Attempt, item.attempt.id)
        if gr is None or a is None or gr.state != REPLACING:
            return
        if a.state not in LIVE or a.stop_requested_at is not None:
            _close_round(
                s, a, gr, f"the attempt is {'stopping' if a.state in LIVE else 'over'}", now
            )
            return
        err = written.get(gr.id)
        if gr.id in written:
            if err is None:
                gr.directive_at = now
            elif gr.detail != err:
                gr.detail = err[:500]
                emit(s, now, "store_unwritable", f"round {gr.round}: {err}", job_id=a.job_id,
                     attempt_id=a.id, level="warning")  # fmt: skip
        s.add(gr)
        for row_id in item.launch or {}:
            got = results.get(row_id)
            row = s.get(AttemptInstance, row_id)
            if got is None or row is None or row.instance_id is not None:
                continue
            if got.error is None and got.value:
                self._record(s, a, row, got.value[0], now)
                continue
            error = got.error or ProviderFatal("the provider returned no instance")
            if not self._launch_failed(s, a, gr, row, error, now):
                return  # abandoned
        sup = results.get(f"{gr.id}/superseded")
        if sup is not None and sup.error is not None:
            emit(s, now, "terminate_failed", safe_message(sup.error), job_id=a.job_id,
                 attempt_id=a.id, level="warning")  # fmt: skip
        mine = s.exec(
            select(AttemptInstance).where(
                AttemptInstance.attempt_id == a.id, AttemptInstance.round == gr.round
            )
        ).all()
        rows = s.exec(select(AttemptInstance).where(AttemptInstance.attempt_id == a.id)).all()
        current = current_rows(rows)
        if mine and all(r.state is AttemptState.RUNNING for r in current):
            gr.state, gr.resumed_at = RESUMED, now
            waited = (now - gr.decided_at).total_seconds() / 60
            emit(
                s,
                now,
                "gang_resumed",
                f"round {gr.round}: all {a.nodes} nodes run again (node "
                f"{gr.nodes} replaced in {gr.pool}) {waited:.1f} min after the loss",
                job_id=a.job_id,
                attempt_id=a.id,
            )
            s.add(gr)
            return
        if gr.deadline is not None and now > gr.deadline:
            self._abandon(
                s, a, gr, f"the replacement did not run within {cfg.gangs.replace_wait}", now
            )

    @staticmethod
    def _record(
        s: Session, a: Attempt, row: AttemptInstance, inst: Instance, now: datetime
    ) -> None:
        row.instance_id, row.instance_scope = inst.id, inst.scope
        row.region = inst.region or row.region
        row.zone = inst.zone or row.zone
        observe_node(row, inst, now)
        s.add(row)
        emit(
            s,
            now,
            "gang_node_launched",
            f"node {row.node} of {a.nodes} (round {row.round}): {inst.id} on {row.pool or a.pool}",
            job_id=a.job_id,
            attempt_id=a.id,
        )

    def _launch_failed(
        self,
        s: Session,
        a: Attempt,
        gr: GangRound,
        row: AttemptInstance,
        error: BaseException,
        now: datetime,
    ) -> bool:
        """A replacement's launch failed: retried (transient), moved to the other market of
        the zone (capacity, when allowed), or the round abandoned. False when abandoned."""
        cfg = self._config()
        why = safe_message(error)
        if isinstance(error, CapacityUnavailable):
            pool = row.pool or a.pool
            mark_unavailable(s, error.pool or pool, why, now, cfg.daemon.unavailable_ttl)
            fallback = self._fallback(s, a, row, now) if not row.pool else None
            if fallback is not None:
                row.pool, row.price_per_hour = fallback.pool, fallback.price_per_hour
                s.add(row)
                gr.pool, gr.price_per_hour = fallback.pool, fallback.price_per_hour
                s.add(gr)
                emit(s, now, "gang_replace", f"no capacity in {pool} ({why}): replacing node "
                     f"{row.node} in {fallback.pool}", job_id=a.job_id, attempt_id=a.id,
                     level="warning")  # fmt: skip
                return True
            self._abandon(s, a, gr, f"no pool can take node {row.node} ({why})", now)
            return False
        if isinstance(error, LaunchRejected | SetupError | ProviderFatal):
            self._abandon(s, a, gr, f"the replacement was refused ({why})", now)
            return False
        msg = f"launching node {row.node}: {why}; will retry with the same token"
        if gr.detail != msg:
            gr.detail = msg[:500]
            s.add(gr)
            emit(s, now, "launch_retry", msg, job_id=a.job_id, attempt_id=a.id, level="warning")
        return True

    def _fallback(
        self, s: Session, a: Attempt, row: AttemptInstance, now: datetime
    ) -> decision.Replacement | None:
        job = s.get(Job, a.job_id)
        if job is None:
            return None
        spec = JobSpec.model_validate_json(job.spec_json)
        pools = {p.pool: p for p in s.exec(select(PoolState)).all()}
        got = self._replacement(s, a, job, spec, self.catalog.catalog, pools, 1, lambda _: 0.0, now)
        return got if got is not None and got.pool != a.pool else None


def _ref(r: AttemptInstance) -> ResourceRef:
    return ResourceRef(r.instance_id or "", r.region, r.zone, r.instance_scope, r.started_at)


def _what(r: AttemptInstance) -> str:
    if r.state is not AttemptState.ENDED:
        return "notice"
    return r.end_reason or "ended"


__all__ = ["GangRecovery", "replacement_token"]


def _close_round(s: Session, a: Attempt, gr: GangRound, why: str, now: datetime) -> None:
    """End a replacement round unfinished: its replacements that never reached the cloud are
    dropped (no instance, no cost)."""
    gr.state, gr.ended_at, gr.detail = ABANDONED, now, why[:500]
    s.add(gr)
    for r in s.exec(
        select(AttemptInstance).where(
            AttemptInstance.attempt_id == a.id,
            AttemptInstance.round == gr.round,
            col(AttemptInstance.instance_id).is_(None),
        )
    ).all():
        s.delete(r)
