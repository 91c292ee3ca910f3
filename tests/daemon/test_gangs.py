"""Gang jobs through the real controllers over the in-memory cloud: one pool for N nodes,
all or nothing, per-node billing, a node's notice stopping the whole gang, elastic shrink."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlmodel import Session, select

from providers.base import (
    CapacityUnavailable,
    EndReason,
    Instance,
    LaunchRequest,
    TransientError,
)
from scheduler.core.clock import SimClock
from scheduler.core.config import Config, DaemonSettings
from scheduler.core.placement import PlacementContext, Requirements, expected_cost, gang_rate, place
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.checkpoints import CheckpointStores, StoreError
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.db import open_db
from scheduler.state.models import Attempt, AttemptInstance, BudgetSpend, PoolState
from tests.support.fakes import NOW, FakeProvider, offering
from tests.support.world import World
from trainer import contract

pytestmark = pytest.mark.timeout(120)
POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
POOL_B = "aws/us-east-1b/p3.2xlarge/spot"
WHOLE = {"recovery": "whole"}  # the gang is re-placed whole on any loss (tests of that path)


class PartialCloud(FakeProvider):
    """A cloud that is not all-or-nothing: in `short` pools it starts k instances, then
    answers the next one with a capacity error (what the local market simulates)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.short: dict[str, int] = {}

    def launch(self, request: LaunchRequest) -> list[Instance]:
        k = self.short.get(request.offering.pool)
        if k is None or request.count <= k or request.token in self._tokens:
            return super().launch(request)
        if k:
            super().launch(replace(request, count=k))
        raise CapacityUnavailable(
            f"fake: no capacity for node {k} in {request.offering.pool}", request.offering.pool
        )


def _nodes(w, attempt_id: str) -> list[AttemptInstance]:
    with Session(w.rec.engine) as s:
        return list(
            s.exec(
                select(AttemptInstance)
                .where(AttemptInstance.attempt_id == attempt_id)
                .order_by(AttemptInstance.node)
            ).all()
        )


def _live(w) -> list[Instance]:
    return w.provider.running()


def test_a_gang_launches_whole_in_one_pool_with_one_token_family(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1", nodes=3)
    w.tick()
    (a,) = w.attempts(jid)
    req = w.provider.last_request
    assert req.count == 3 and req.token == a.token
    assert req.placement_group == f"spotwise-{a.id}"
    assert req.env[contract.ENV_NNODES] == "3" and req.env[contract.ENV_RDZV_ID] == a.id
    assert a.nodes == 3 and a.pool == POOL_A and a.state is AttemptState.RUNNING
    nodes = _nodes(w, a.id)
    assert [n.node for n in nodes] == [0, 1, 2]
    assert {n.instance_id for n in nodes} == {i.id for i in _live(w)}
    assert w.job(jid).state is JobState.RUNNING


def test_a_gang_is_billed_per_node_at_the_price_paid_and_budgets_see_n_times_the_burn(
    make_world,
):
    w = make_world(budgets=[{"name": "all", "limit_usd": 1000, "window": "total"}])
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    w.tick(3600)
    (a,) = w.attempts(jid)
    nodes = _nodes(w, a.id)
    assert all(n.cost_usd == pytest.approx(0.9, rel=0.01) for n in nodes)
    assert a.cost_usd == pytest.approx(sum(n.cost_usd for n in nodes))
    with Session(w.rec.engine) as s:
        st = w.rec.spend.statuses(s, w.clock.now())
    assert st[0].burn_per_hour == pytest.approx(2 * 0.9)


def _published(w) -> float:
    with Session(w.rec.engine) as s:
        (row,) = s.exec(select(BudgetSpend)).all()
    return row.spent_usd


@pytest.mark.parametrize("store", ["readable", "unreadable"])
def test_a_gang_whose_end_is_learned_after_an_accrual_is_billed_to_its_end_at_once(
    make_world, monkeypatch, store
):
    """Both nodes end, an accrual charges past that, then a pass learns it: the gang, each
    node, the job and the published budget are billed to the nodes' ends in that pass, not at
    the next accrual. With the store unreadable the outcome waits, billing stops all the same
    (passes later, nothing more is charged)."""
    w = make_world(budgets=[{"name": "all", "limit_usd": 100.0, "window": "total"}])
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    w.tick(600)
    (a,) = w.attempts(jid)
    if store == "unreadable":
        monkeypatch.setattr(CheckpointStores, "read", _denied)
    for n in _nodes(w, a.id):
        w.provider.end(n.instance_id, EndReason.EXITED, exit_code=0)
    ended = w.clock.now()
    w.clock.advance(300)
    w.rec.accrue()
    w.clock.advance(5)
    w.rec.reconcile()
    if store == "unreadable":
        w.tick(300, n=3)  # still unreadable: no outcome, no more billing
    (a,) = w.attempts(jid)[:1]
    paid = 0.9 * (ended - a.started_at).total_seconds() / 3600
    assert a.accrued_until == a.ended_at == ended
    assert (a.state is AttemptState.ENDED) is (store == "readable")
    assert [n.cost_usd for n in _nodes(w, a.id)] == [pytest.approx(paid, rel=1e-9)] * 2
    assert a.cost_usd == pytest.approx(2 * paid, rel=1e-9)
    assert w.job(jid).cost_usd == pytest.approx(2 * paid, rel=1e-9)
    assert _published(w) == pytest.approx(2 * paid, rel=1e-6)
    if store == "unreadable":
        assert len(w.events("store_unreadable")) == 1  # said once, not every pass


def test_a_node_that_ends_before_its_peers_is_billed_to_its_end_in_that_pass(make_world):
    w = make_world(budgets=[{"name": "all", "limit_usd": 100.0, "window": "total"}], gangs=WHOLE)
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    w.tick(600)
    (a,) = w.attempts(jid)
    first = _nodes(w, a.id)[0]
    w.provider.end(first.instance_id, EndReason.INTERRUPTED)
    ended = w.clock.now()
    w.clock.advance(300)
    w.rec.accrue()
    w.clock.advance(5)
    w.rec.reconcile()  # learns node 0's end (and stops node 1): no accrual after it
    node0, node1 = _nodes(w, a.id)
    assert node0.accrued_until == node0.ended_at == ended
    assert node0.cost_usd == pytest.approx(0.9 * (ended - first.started_at).total_seconds() / 3600)
    assert node1.state is not AttemptState.ENDED or node1.ended_at > ended
    (a,) = w.attempts(jid)[:1]
    assert a.cost_usd == pytest.approx(node0.cost_usd + node1.cost_usd, rel=1e-9)
    assert w.job(jid).cost_usd == pytest.approx(a.cost_usd, rel=1e-9)
    assert _published(w) == pytest.approx(a.cost_usd, rel=1e-6)


def _denied(self, uri, name):
    raise StoreError("s3://bucket/ckpt/DONE: AccessDenied")


def test_a_notice_on_one_node_stops_the_whole_gang_which_is_replaced(make_world):
    w = make_world(gangs=WHOLE)
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    (a,) = w.attempts(jid)
    n1 = _nodes(w, a.id)[1].instance_id
    w.provider.notice(n1)
    w.tick()
    assert w.events("gang_stop"), "the other node is told to checkpoint"
    w.tick(n=3)
    first, second = w.attempts(jid)[:2]
    assert first.end_reason is AttemptEnd.INTERRUPTED
    assert all(n.state is AttemptState.ENDED for n in _nodes(w, first.id))
    assert second.nodes == 2 and second.pool != POOL_A  # the interrupted pool is avoided
    assert w.job(jid).recoveries == 1 and w.job(jid).state is JobState.RUNNING
    assert len(_live(w)) == 2


def test_a_node_lost_without_notice_also_stops_the_gang(make_world):
    w = make_world(gangs=WHOLE)
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    (a,) = w.attempts(jid)
    w.provider.end(_nodes(w, a.id)[0].instance_id, EndReason.INTERRUPTED)
    w.tick(n=3)
    assert w.attempts(jid)[0].end_reason is AttemptEnd.INTERRUPTED
    assert len(_live(w)) == 2 and w.attempts(jid)[1].state is AttemptState.RUNNING


def test_partial_launch_terminates_what_came_up_marks_the_pool_and_replaces(make_world):
    w = make_world(provider=PartialCloud([offering("us-east-1a", price=0.9),
                                          offering("us-east-1b", price=1.1)]))  # fmt: skip
    w.provider.short[POOL_A] = 2
    jid = w.submit(gpus="V100:1", nodes=4)
    w.tick(n=3)
    first, second = w.attempts(jid)[:2]
    assert first.end_reason is AttemptEnd.LAUNCH_FAILED
    assert "only 2 of 4 p3.2xlarge in us-east-1a before the capacity error" in first.detail
    assert all(n.state is AttemptState.ENDED for n in _nodes(w, first.id))
    assert second.pool == POOL_B and second.state is AttemptState.RUNNING
    live = _live(w)
    assert len(live) == 4 and {i.zone for i in live} == {"us-east-1b"}  # nothing leaked
    with Session(w.rec.engine) as s:
        ps = s.get(PoolState, POOL_A)
        assert ps.gang_capacity == 2 and (ps.unavailable_until is None)
    # A single-node job still goes to the cheaper pool: only gangs of more than 2 skip it.
    solo = w.submit(name="solo", gpus="V100:1")
    w.tick()
    assert w.attempts(solo)[0].pool == POOL_A


def test_elastic_gang_continues_on_fewer_nodes_when_n_cannot_be_placed(make_world):
    w = make_world(provider=PartialCloud([offering("us-east-1a", price=0.9)]))
    w.provider.short[POOL_A] = 1
    jid = w.submit(gpus="V100:1", nodes=2, min_nodes=1)
    w.tick(n=3)
    attempts = w.attempts(jid)
    assert attempts[0].end_reason is AttemptEnd.LAUNCH_FAILED
    assert attempts[-1].nodes == 1 and attempts[-1].state is AttemptState.RUNNING
    assert "on 1 of 2 nodes" in w.job(jid).reason or w.job(jid).state is JobState.RUNNING
    # Without min_nodes the gang waits, saying why.
    w2 = w.submit(name="rigid", gpus="V100:1", nodes=2)
    w.tick()
    assert not w.attempts(w2)
    assert "only 1 of 2 p3.2xlarge in us-east-1a" in w.job(w2).reason


def test_a_crash_during_a_gang_launch_leaves_no_half_gang(make_world, tmp_path):
    w = make_world(provider=PartialCloud([offering("us-east-1a", price=0.9),
                                          offering("us-east-1b", price=1.1)]))  # fmt: skip
    w.provider.short[POOL_A] = 2

    def crash(name: str) -> None:
        if name == "after_launch":
            raise CrashForTest(name)

    rec = Reconciler(w.rec.engine, w.rec.config, {"fake": w.provider}, w.clock, crash_hook=crash)
    rec.poll_prices()
    jid = w.submit(gpus="V100:1", nodes=4)
    w.clock.advance(5)
    with pytest.raises(CrashForTest):
        rec.reconcile()
    # The launch call itself cleaned up; the restarted daemon finds the attempt unrecorded.
    w.tick(n=4)
    live = _live(w)
    assert len(live) == 4 and {i.zone for i in live} == {"us-east-1b"}
    assert w.attempts(jid)[0].state is AttemptState.ENDED


def test_a_half_gang_found_after_a_restart_is_completed_by_its_token(make_world):
    """The daemon died between two nodes (a non-atomic cloud): adoption finds 2 of 4, the
    same token completes the family, and the gang runs whole."""
    w = make_world()
    jid = w.submit(gpus="V100:1", nodes=4)
    w.clock.advance(5)
    w.rec.jobs.step()
    (a,) = w.attempts(jid)
    # What a crashed launch leaves: the intent and the first two nodes, nothing recorded.
    with Session(w.rec.engine) as s:
        row = s.get(Attempt, a.id)
        row.launch_requested_at = w.clock.now()
        s.add(row)
        s.commit()
    o = w.rec.catalogs.catalog.offering_for_pool(a.pool)
    half = LaunchRequest(a.token, o, ["train"], {}, {"spotwise-attempt": a.id}, count=2)
    w.provider.launch(half)
    w.provider._tokens.pop(a.token)  # the cloud forgets the pair is one request
    for i, inst in enumerate(w.provider.instances.values()):
        w.provider._tokens.setdefault(a.token, []).append(inst.id)
        assert inst.node == i
    w.tick(n=3)
    # 2 of 4 within the launch timeout: left to relaunch, which (fake) returns the known two;
    # the gang is stopped as partial and re-placed whole.
    live = _live(w)
    assert len(live) == 4
    assert w.attempts(jid)[0].state is AttemptState.ENDED


def test_gang_placement_scales_price_and_interruption_rate_by_n():
    from scheduler.core.catalog import Catalog

    spot = offering("us-east-1a", price=1.0)
    od = offering("us-east-1a", price=1.3, market="on-demand")
    cat = Catalog([spot, od])
    ctx = PlacementContext(
        now=NOW, remaining_gpu_hours=100, restart_overhead_hours=0.5, lost_work_hours=0.5
    )
    one = place(_req(1), cat, ctx)
    many = place(_req(32), cat, ctx)
    assert one.offering.market.value == "spot"  # 1.0 x (1 + 0.1) < 1.3
    assert many.offering.market.value == "on-demand"  # 32 nodes: 1.0 x (1 + 3.2) > 1.3
    assert gang_rate(0.1, 32) == pytest.approx(3.2)
    rows = cat.rows_for_models(["V100"])
    c1 = expected_cost(cat, rows[:1], ctx, nodes=1)[0]
    c4 = expected_cost(cat, rows[:1], ctx, nodes=4)[0]
    assert c4 > c1  # same work, same price, four times the interruption rate


def test_a_hard_budget_reserves_n_times_the_price():
    from scheduler.core.catalog import Catalog

    cat = Catalog([offering("us-east-1a", price=1.0)])
    ctx = PlacementContext(now=NOW, max_affordable_price=3.0, budget_name="b")
    assert place(_req(3), cat, ctx).placed
    d = place(_req(4), cat, ctx)
    assert not d.placed and "cannot pay $4.00/h" in d.reason


def _req(nodes: int, min_nodes: int | None = None) -> Requirements:
    from scheduler.core.jobspec import parse_gpu

    return Requirements(gpus=(parse_gpu("V100:1"),), nodes=nodes, min_nodes=min_nodes)


def test_launch_timeout_stops_a_gang_that_never_came_up_whole(make_world):
    w = make_world(launch_timeout="2m")
    w.provider.start_running = False
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    (a,) = w.attempts(jid)
    # Node 1 never leaves PENDING.
    n1 = _nodes(w, a.id)[1].instance_id
    w.provider.instances[n1].state = w.provider.instances[n1].state.__class__("pending")
    orig = w.provider._view

    def stuck(inst):
        v = orig(inst)
        if inst.id == n1 and v.state.value == "running":
            v.state = v.state.__class__("pending")
        return v

    w.provider._view = stuck
    w.tick(60, n=3)
    first = w.attempts(jid)[0]
    assert first.stop_reason == "launch_timeout"
    assert "only 1 of 2 p3.2xlarge in us-east-1a came up within" in first.detail
    w.provider._view = orig
    w.tick(n=3)
    assert w.attempts(jid)[0].end_reason is AttemptEnd.LAUNCH_FAILED


def test_a_gang_runs_once_every_node_does(make_world):
    w = make_world()
    w.provider.start_running = False  # GCE/Azure style: PENDING, the outcome via describe
    jid = w.submit(gpus="V100:1", nodes=2)
    w.tick()
    assert w.attempts(jid)[0].state is AttemptState.LAUNCHING
    w.tick()
    a = w.attempts(jid)[0]
    assert a.state is AttemptState.RUNNING and w.job(jid).state is JobState.RUNNING
    assert all(n.state is AttemptState.RUNNING for n in _nodes(w, a.id))


class FlakyCleanupCloud(PartialCloud):
    """A partial gang whose clean-up listing fails once: the launch cannot say what it left."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.fail_find = 1

    def find_by_token(self, token: str, region: str) -> list[Instance]:
        if self.fail_find:
            self.fail_find -= 1
            raise TransientError("fake: listing failed once")
        return super().find_by_token(token, region)


@pytest.mark.parametrize("started", [0, 2])
@pytest.mark.slow
def test_a_gang_whose_clean_up_failed_is_stopped_by_token_not_cancelled(make_world, started):
    """Whatever the failed launch left is found by its token and terminated; the attempt ends
    as a failed launch (never "cancelled by user"), and the job is re-placed elsewhere."""
    w = make_world(provider=FlakyCleanupCloud([offering("us-east-1a", price=0.9),
                                               offering("us-east-1b", price=1.1)]))  # fmt: skip
    w.provider.short[POOL_A] = started
    jid = w.submit(gpus="V100:1", nodes=4)
    w.tick(n=5)
    assert w.job(jid).state is not JobState.CANCELLED, w.job(jid).reason
    first = w.attempts(jid)[0]
    assert first.end_reason is AttemptEnd.LAUNCH_FAILED, (first.end_reason, first.detail)
    assert w.attempts(jid)[-1].pool == POOL_B
    live = _live(w)
    assert len(live) == 4 and {i.zone for i in live} == {"us-east-1b"}  # nothing left in 1a


def test_a_gang_is_not_placed_where_its_provider_cannot_launch_it_in_one_request(tmp_path):
    """A provider that launches one instance per request (GCE, Azure here) is skipped for a
    gang even when it is cheaper: before, each such pool cost the job a failed attempt."""
    clock = SimClock(NOW)
    aws = FakeProvider([offering("us-east-1a", price=0.9)], clock=clock)
    gcp = FakeProvider(
        [offering(z, cloud="gcp", price=0.4) for z in ("us-central1-a", "us-central1-b")],
        name="gcp",
        clock=clock,
    )
    gcp.capabilities = replace(gcp.capabilities, max_count=1)
    url = f"sqlite:///{tmp_path}/db.sqlite"
    cfg = Config(daemon=DaemonSettings(database_url=url, accrue_interval="30s"))
    rec = Reconciler(open_db(url), cfg, {"fake": aws, "gcp": gcp}, clock)
    rec.poll_prices()
    w = World(rec, aws, clock, tmp_path)
    gang = w.submit(gpus="V100:1", nodes=2)
    single = w.submit(name="single", gpus="V100:1")
    w.tick()
    (a,) = w.attempts(gang)
    assert a.pool == POOL_A and a.nodes == 2 and a.state is AttemptState.RUNNING
    (b,) = w.attempts(single)
    assert b.pool.startswith("gcp/") and b.state is AttemptState.RUNNING
    assert gcp.last_request is not None and gcp.last_request.count == 1
