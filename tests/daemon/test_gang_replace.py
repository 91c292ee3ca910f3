"""A running gang that loses a node, through the real controllers over the in-memory cloud:
the lost node is replaced and the others keep running (one attempt, a new rendezvous round
in the checkpoint store), billed per node at the price paid; or, where replacing costs more
or cannot be done, the gang is re-placed whole, and an event says which and why."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session, select

from providers.base import CapacityUnavailable, EndReason, Instance, LaunchRequest, TransientError
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.hooks_for_tests import CrashForTest
from scheduler.daemon.reconcile import Reconciler
from scheduler.state.models import AttemptInstance, GangRound, PoolState
from tests.support.fakes import offering
from trainer import contract, rendezvous

pytestmark = pytest.mark.timeout(120)
POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
OD_A = "aws/us-east-1a/p3.2xlarge/on-demand"
REPLACE = {"recovery": "replace"}


def _rows(w, attempt_id: str) -> list[AttemptInstance]:
    with Session(w.rec.engine) as s:
        return list(
            s.exec(
                select(AttemptInstance)
                .where(AttemptInstance.attempt_id == attempt_id)
                .order_by(AttemptInstance.node, AttemptInstance.round)
            ).all()
        )


def _rounds(w, attempt_id: str) -> list[GangRound]:
    with Session(w.rec.engine) as s:
        return list(
            s.exec(
                select(GangRound)
                .where(GangRound.attempt_id == attempt_id)
                .order_by(GangRound.round)
            ).all()
        )


def _running_gang(w, nodes: int = 2) -> tuple[str, str]:
    jid = w.submit(gpus="V100:1", nodes=nodes, gpu_hours=20)
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING
    return jid, a.id


def _store(w, jid: str):
    return contract.parse_uri(w.job(jid).checkpoint_uri)


def test_a_noticed_node_is_replaced_and_the_others_keep_running(make_world):
    w = make_world(gangs=REPLACE)
    launches: list[LaunchRequest] = []
    w.provider.on_launch = lambda req, out: launches.append(req)
    jid, aid = _running_gang(w, nodes=3)
    before = {r.node: r.instance_id for r in _rows(w, aid)}
    w.provider.notice(before[1])
    w.tick()
    # One attempt still: node 1 has a round-1 replacement, nodes 0 and 2 were never stopped.
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING and a.stop_requested_at is None
    rows = _rows(w, aid)
    assert [(r.node, r.round) for r in rows] == [(0, 0), (1, 0), (1, 1), (2, 0)]
    new = rows[2]
    assert new.instance_id not in before.values() and new.state is AttemptState.RUNNING
    assert {i.id for i in w.provider.running()} >= {before[0], before[2], new.instance_id}
    # Its launch: one instance, node 1's rank and tag, the round, the gang's group, its own
    # deterministic token.
    req = launches[-1]
    assert req.count == 1 and req.gang_node == 1 and req.tags["spotwise-node"] == "1"
    assert req.env[rendezvous.ENV_RDZV_ROUND] == "1" and req.env[contract.ENV_NNODES] == "3"
    assert req.env[contract.ENV_RDZV_ID] == aid and req.placement_group == f"spotwise-{aid}"
    assert req.token == f"{a.token}-r1-n1"
    # The round is in the checkpoint store, for the survivors' wrappers.
    loc = _store(w, jid)
    doc = rendezvous.parse_round(loc.file(rendezvous.round_name(a.number)).read_text())
    assert doc == rendezvous.Round(a.number, 1, 3, (1,))
    kinds = [e.kind for e in w.events()]
    assert "gang_replace" in kinds and "gang_stop" not in kinds
    (gr,) = _rounds(w, aid)
    assert gr.state == "resumed" and gr.nodes == "1" and gr.pool == POOL_A
    # The noticed node is taken by the cloud; the gang is not disturbed.
    w.provider.end(before[1], EndReason.INTERRUPTED)
    w.tick(n=2)
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING and w.job(jid).state is JobState.RUNNING
    with Session(w.rec.engine) as s:
        assert s.get(PoolState, POOL_A).interruptions == 1  # the pool learned the loss


def test_a_node_lost_without_notice_is_replaced_and_the_gang_finishes(make_world):
    w = make_world(gangs=REPLACE)
    jid, aid = _running_gang(w)
    n0, n1 = (r.instance_id for r in _rows(w, aid))
    w.tick(600)
    w.provider.end(n1, EndReason.INTERRUPTED)
    w.tick()
    rows = _rows(w, aid)
    repl = next(r for r in rows if r.round == 1)
    assert repl.node == 1 and repl.state is AttemptState.RUNNING
    w.tick(600)
    # Training completes: DONE in the store, every current node exits 0.
    loc = _store(w, jid)
    loc.file(contract.DONE).write_text("done\n")
    for r in (n0, repl.instance_id):
        w.provider.end(r, EndReason.EXITED, exit_code=0)
    w.tick(n=2)
    (a,) = w.attempts(jid)
    assert a.end_reason is AttemptEnd.FINISHED and w.job(jid).state is JobState.SUCCEEDED
    # Billed per node at the price paid: node 0 the whole time, the lost node 1 until it
    # ended, the replacement from its start; the attempt is their sum.
    rows = _rows(w, aid)
    by = {(r.node, r.round): r for r in rows}
    assert by[(0, 0)].cost_usd == pytest.approx(0.9 * (1205 / 3600), rel=1e-3)
    assert by[(1, 0)].cost_usd == pytest.approx(0.9 * (600 / 3600), rel=1e-2)
    assert by[(1, 1)].cost_usd == pytest.approx(0.9 * (605 / 3600), rel=1e-2)
    assert a.cost_usd == pytest.approx(sum(r.cost_usd for r in rows), rel=1e-9)


def test_the_waiting_nodes_are_in_the_budgets_burn(make_world):
    w = make_world(gangs=REPLACE, budgets=[{"name": "all", "limit_usd": 1000, "window": "total"}])
    w.provider.start_running = False  # the replacement stays PENDING (a slow boot)
    jid = w.submit(gpus="V100:1", nodes=2, gpu_hours=20)
    w.tick(n=2)
    (a,) = w.attempts(jid)
    w.provider.end(_rows(w, a.id)[1].instance_id, EndReason.INTERRUPTED)
    real_view = w.provider._view

    def slow(inst: Instance) -> Instance:
        v = real_view(inst)
        if v.node == 1 and v.state.value == "running" and inst.launched_at == w.clock.now():
            v.state = v.state.__class__("pending")
        return v

    w.provider._view = slow
    w.tick()
    with Session(w.rec.engine) as s:
        st = w.rec.spend.statuses(s, w.clock.now())
    assert st[0].burn_per_hour == pytest.approx(2 * 0.9)  # the survivor still bills


def test_no_capacity_in_the_pool_moves_the_replacement_to_the_zones_on_demand(make_world):
    w = make_world(gangs=REPLACE)
    _jid, aid = _running_gang(w)
    n1 = _rows(w, aid)[1].instance_id
    w.provider.fail_launch[POOL_A] = CapacityUnavailable("fake: no V100 left", POOL_A)
    w.provider.end(n1, EndReason.INTERRUPTED)
    w.tick(n=3)
    repl = next(r for r in _rows(w, aid) if r.round == 1)
    assert repl.pool == OD_A and repl.price_per_hour == pytest.approx(3.06)
    assert repl.state is AttemptState.RUNNING
    assert w.provider.instances[repl.instance_id].market.value == "on-demand"
    assert w.provider.instances[repl.instance_id].zone == "us-east-1a"  # the placement group's
    w.tick(3600)
    repl = next(r for r in _rows(w, aid) if r.round == 1)
    assert repl.cost_usd == pytest.approx(3.06, rel=1e-2)  # at its own price


def test_without_a_pool_for_the_replacement_the_gang_is_re_placed_whole(make_world):
    w = make_world(
        gangs=REPLACE,
        offerings=[offering("us-east-1a", price=0.9), offering("us-east-1b", price=1.1)],
    )
    jid, aid = _running_gang(w)
    w.provider.fail_launch[POOL_A] = CapacityUnavailable("fake: no V100 left", POOL_A)
    w.provider.end(_rows(w, aid)[1].instance_id, EndReason.INTERRUPTED)
    w.tick(n=4)
    first, second = w.attempts(jid)[:2]
    assert first.end_reason is AttemptEnd.INTERRUPTED and second.nodes == 2
    assert second.pool == "aws/us-east-1b/p3.2xlarge/spot"
    (gr,) = _rounds(w, aid)
    assert gr.state == "abandoned" and "no pool can take node 1" in gr.detail
    assert [
        e for e in w.events("gang_replace_abandoned") if "re-placing the gang whole" in e.message
    ]
    assert not [r for r in _rows(w, aid) if r.round == 1]  # never launched, never billed


def test_a_replacement_not_running_within_the_wait_bound_re_places_the_gang(make_world):
    w = make_world(gangs={"recovery": "replace", "replace_wait": "5m"})
    jid, aid = _running_gang(w)
    real_view = w.provider._view

    def stuck(inst: Instance) -> Instance:
        v = real_view(inst)
        if inst.tags.get("spotwise-node") == "1" and v.state.value == "running":
            v.state = v.state.__class__("pending")
        return v

    w.provider.end(_rows(w, aid)[1].instance_id, EndReason.INTERRUPTED)
    w.provider._view = stuck
    w.tick()
    assert _rounds(w, aid)[0].state == "replacing"
    w.tick(60, n=6)
    (gr,) = _rounds(w, aid)
    assert gr.state == "abandoned" and "did not run within 0:05:00" in gr.detail
    w.provider._view = real_view
    w.tick(n=3)
    assert w.attempts(jid)[0].end_reason is AttemptEnd.INTERRUPTED
    assert w.attempts(jid)[-1].state is AttemptState.RUNNING


def test_a_crash_after_the_replacement_launch_adopts_it_by_its_token(make_world):
    w = make_world(gangs=REPLACE)
    _jid, aid = _running_gang(w)
    w.provider.end(_rows(w, aid)[1].instance_id, EndReason.INTERRUPTED)
    w.clock.advance(5)
    w.rec.instances.observe()  # the decision and the intent, committed
    real = w.provider.launch
    calls: list[str] = []

    def launch_then_crash(req: LaunchRequest) -> list[Instance]:
        out = real(req)
        calls.append(req.token)
        if len(calls) == 1:
            raise TransientError("fake: the reply was lost")
        return out

    w.provider.launch = launch_then_crash  # type: ignore[method-assign]
    w.rec.gangs.step()  # launched, but the answer never came
    w.tick(n=2)
    assert calls[0] == calls[1]  # the same token: the cloud returns the same instance
    gang = [i for i in w.provider.instances.values() if i.tags.get("spotwise-attempt") == aid]
    assert len([i for i in gang if i.node == 1 and i.live]) == 1
    assert next(r for r in _rows(w, aid) if r.round == 1).state is AttemptState.RUNNING


def test_a_crash_between_the_decision_and_the_launch_launches_once(make_world):
    w = make_world(gangs=REPLACE)
    _jid, aid = _running_gang(w)

    def crash(name: str) -> None:
        raise CrashForTest(name)

    w.provider.end(_rows(w, aid)[1].instance_id, EndReason.INTERRUPTED)
    w.clock.advance(5)
    w.rec.instances.observe()
    rec = Reconciler(w.rec.engine, w.rec.config, {"fake": w.provider}, w.clock, crash_hook=crash)
    rec.poll_prices()
    w.tick(n=2)
    gang = [i for i in w.provider.instances.values() if i.tags.get("spotwise-attempt") == aid]
    assert len([i for i in gang if i.live]) == 2


def test_cancelling_during_a_replacement_drops_it_and_ends_the_gang(make_world):
    from scheduler.state.desired import cancel

    w = make_world(gangs=REPLACE)
    w.provider.start_running = False
    jid = w.submit(gpus="V100:1", nodes=2, gpu_hours=20)
    w.tick(n=2)
    (a,) = w.attempts(jid)
    w.provider.fail_launch[POOL_A] = TransientError("fake: try again")
    w.provider.end(_rows(w, a.id)[1].instance_id, EndReason.INTERRUPTED)
    w.tick()
    assert _rounds(w, a.id)[0].state == "replacing"
    cancel(w.rec.engine, jid, w.clock.now())
    w.tick(n=4)
    assert w.job(jid).state is JobState.CANCELLED
    assert _rounds(w, a.id)[0].state == "abandoned"
    assert not w.provider.running()


def test_auto_keeps_the_gang_where_replacing_is_cheaper_and_leaves_a_hazardous_pool(make_world):
    w = make_world()  # recovery = auto
    jid, aid = _running_gang(w, nodes=4)
    w.provider.end(_rows(w, aid)[2].instance_id, EndReason.INTERRUPTED)
    w.tick()
    (gr,) = _rounds(w, aid)
    assert gr.state == "resumed", gr.reason
    assert gr.reason.startswith("replacing 1 of 4 nodes in aws/us-east-1a/p3.2xlarge/spot: ~")
    # The same pool, now known to lose nodes every few minutes: a safer one exists.
    with Session(w.rec.engine) as s:
        ps = s.get(PoolState, POOL_A)
        ps.interruptions, ps.exposure_hours = 400, 20.0
        s.add(ps)
        s.commit()
    cur = next(r for r in _rows(w, aid) if r.node == 0)
    w.provider.end(cur.instance_id, EndReason.INTERRUPTED)
    w.tick(n=3)
    rounds = _rounds(w, aid)
    assert rounds[-1].state == "whole", rounds[-1].reason
    assert rounds[-1].reason.startswith("re-placing the gang whole: ~")
    assert "aws/us-east-1b/p3.2xlarge/spot" in rounds[-1].reason
    msgs = [e.message for e in w.events("gang_replace_whole")]
    assert msgs and "hazard" in msgs[0]
    assert w.attempts(jid)[-1].pool == "aws/us-east-1b/p3.2xlarge/spot"


def test_a_gang_not_yet_whole_stays_all_or_nothing(make_world):
    w = make_world(gangs=REPLACE)
    w.provider.start_running = False
    jid = w.submit(gpus="V100:1", nodes=2, gpu_hours=20)
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.LAUNCHING
    w.provider.end(_rows(w, a.id)[1].instance_id, EndReason.INTERRUPTED)
    w.tick(n=3)
    assert not _rounds(w, a.id) and w.attempts(jid)[0].stop_reason == "peer"


def test_the_round_file_says_which_nodes_were_replaced(make_world):
    w = make_world(gangs=REPLACE)
    jid, aid = _running_gang(w, nodes=4)
    rows = _rows(w, aid)
    w.provider.notice(rows[0].instance_id)
    w.provider.end(rows[3].instance_id, EndReason.INTERRUPTED)
    w.tick()
    (a,) = w.attempts(jid)
    loc = _store(w, jid)
    doc = json.loads(loc.file(rendezvous.round_name(a.number)).read_text())
    assert doc["replaced"] == [0, 3] and doc["round"] == 1 and doc["nnodes"] == 4
    assert sorted((r.node, r.round) for r in _rows(w, aid) if r.round == 1) == [(0, 1), (3, 1)]
