"""Follow prices: the pure decision (scheduler.core.price_moves), then the daemon moving running
jobs."""

from __future__ import annotations

import pytest
from sqlmodel import Session, select

from scheduler.core.price_moves import Alternative, MoveCosts, Running, decide, move_cost
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.state.models import SpendBucket
from tests.support.fakes import offering

COSTS = MoveCosts(restart_overhead_hours=0.05, checkpoint_hours=0.01, lost_work_hours=1 / 12)
POOL_A = "aws/us-east-1a/p3.2xlarge/spot"
POOL_B = "aws/us-east-1b/p3.2xlarge/spot"
OD = offering("us-east-1a", price=3.06, market="on-demand")


def _run(price: float, ran: float = 2.0, spot: bool = True) -> Running:
    return Running("a", spot, price, price * 1.01, ran)


def _alt(price: float) -> Alternative:
    return Alternative("b", price, price * 1.01)


# -- the decision -------------------------------------------------------------------------


def test_spot_above_on_demand_moves_even_right_after_a_move():
    move = decide(_run(4.0, ran=0.01), _alt(3.06), 3.06, 10, COSTS)
    assert move is not None and "passed on-demand" in move.reason
    assert (move.old_price, move.new_price) == (4.0, 3.06)


def test_above_on_demand_stays_when_nowhere_is_cheaper():
    assert decide(_run(4.0), _alt(4.5), 3.06, 10, COSTS) is None


def test_on_demand_above_its_own_price_rule_does_not_apply():
    # An on-demand attempt is judged by saving only.
    assert decide(_run(3.06, spot=False), _alt(2.9), 2.9, 10, COSTS) is None


def test_clearly_cheaper_pool_moves():
    move = decide(_run(1.0), _alt(0.5), 3.06, 10, COSTS)
    assert move is not None and "cheaper to finish" in move.reason
    stay, go = 1.01 * 10, 0.505 * 10 + move_cost(_run(1.0), _alt(0.5), COSTS)
    assert move.saving_usd == pytest.approx(stay - go)


def test_small_improvement_does_not_move():
    assert decide(_run(1.0), _alt(0.85), 3.06, 10, COSTS) is None


def test_move_cost_outweighs_saving_on_little_remaining_work():
    # 50% cheaper, but only 6 minutes left: the restart and redone work eat the saving.
    assert decide(_run(1.0), _alt(0.5), 3.06, 0.1, COSTS) is None


def test_hysteresis_gap_after_a_move():
    assert decide(_run(1.0, ran=0.2), _alt(0.5), 3.06, 10, COSTS) is None
    assert decide(_run(1.0, ran=0.6), _alt(0.5), 3.06, 10, COSTS) is not None


def test_no_alternative_or_same_pool_stays():
    assert decide(_run(4.0), None, 3.06, 10, COSTS) is None
    assert decide(_run(4.0), Alternative("a", 1.0, 1.0), 3.06, 10, COSTS) is None


def test_migration_cost_counts():
    pricey = MoveCosts(0.05, 0.01, 1 / 12, migration_usd=5.0)
    assert decide(_run(1.0), _alt(0.5), 3.06, 10, COSTS) is not None
    assert decide(_run(1.0), _alt(0.5), 3.06, 10, pricey) is None


# -- the daemon ---------------------------------------------------------------------------


def _reprice(w, a: float, b: float = 1.1) -> None:
    w.provider.set_offerings([offering("us-east-1a", price=a), offering("us-east-1b", price=b), OD])
    w.rec.poll_prices()


def test_price_above_on_demand_moves_and_costs_add_up(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    (a,) = w.attempts(jid)
    assert a.pool == POOL_A
    w.tick(600)
    _reprice(w, 4.0)
    w.tick(n=6)
    attempts = w.attempts(jid)
    assert attempts[0].end_reason is AttemptEnd.MIGRATED
    assert attempts[-1].pool == POOL_B and attempts[-1].state is AttemptState.RUNNING
    (ev,) = w.events("price_move")
    assert "$4.00/h" in ev.message and "$1.10/h" in ev.message and POOL_B in ev.message
    job = w.job(jid)
    assert job.recoveries == 0
    assert job.cost_usd == pytest.approx(sum(x.cost_usd for x in attempts), rel=1e-6)
    with Session(w.rec.engine) as s:
        buckets = s.exec(select(SpendBucket).where(SpendBucket.job_id == jid)).all()
    assert sum(b.usd for b in buckets) == pytest.approx(job.cost_usd, rel=1e-6)
    assert attempts[0].cost_usd > 0.9 * 600 / 3600


def test_small_improvement_is_not_a_move(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    w.tick(3600)
    _reprice(w, 0.9, b=0.8)  # 11% cheaper: below the bar
    w.tick(60, n=5)
    assert not w.events("price_move")
    assert len(w.attempts(jid)) == 1


def test_clearly_cheaper_pool_pulls_a_job_once_it_has_run_a_while(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    _reprice(w, 0.9, b=0.3)
    w.tick(60)
    assert not w.events("price_move")  # just started: inside the hysteresis gap
    w.tick(1800)
    w.tick(n=5)
    assert len(w.events("price_move")) == 1
    assert w.attempts(jid)[-1].pool == POOL_B


def test_flapping_prices_move_at_most_once_in_the_window(make_world):
    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    w.tick(3600)
    for i in range(10):  # A and B swap between cheap and dear every minute for 10 minutes
        if i % 2:
            _reprice(w, 0.9, b=0.3)
        else:
            _reprice(w, 0.3, b=0.9)
        w.tick(60)
    assert len(w.events("price_move")) == 1  # the first swap moves it, the rest are too soon
    assert len(w.attempts(jid)) == 2


def test_migrate_never_is_never_moved(make_world, tmp_path):
    w = make_world()
    jid = w.submit(gpus="V100:1", migrate="never")
    w.tick()
    w.tick(3600)
    _reprice(w, 4.0, b=0.3)
    w.tick(60, n=5)
    assert not w.events("price_move")
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.RUNNING


def test_deadline_job_leaves_spot_above_on_demand(make_world):
    w = make_world(policy={"deadline_policy": "greedy"})
    jid = w.submit(gpus="V100:1", gpu_hours=10, deadline="30h")
    w.tick()
    assert w.attempts(jid)[0].pool == POOL_A
    w.tick(600)
    _reprice(w, 4.0)
    w.tick(n=6)
    attempts = w.attempts(jid)
    assert attempts[0].end_reason is AttemptEnd.MIGRATED
    assert attempts[-1].pool != POOL_A
    assert w.events("price_move") or w.events("policy_move")


def test_migrate_key_accepts_only_its_values():
    from scheduler.core.errors import UserError
    from scheduler.core.jobspec import jobspec_from_dict

    base = {"name": "j", "command": ["x"]}
    assert jobspec_from_dict(base).migrate == "on-price"
    assert jobspec_from_dict({**base, "migrate": "never"}).migrate == "never"
    with pytest.raises(UserError, match="migrate: Input should be 'never' or 'on-price'"):
        jobspec_from_dict({**base, "migrate": "always"})


def test_follow_thresholds_are_config_keys(make_world):
    """[policy] follow_min_saving / follow_min_gap replace the defaults: with a 5% bar an 11%
    cheaper pool pulls the job (the default 20% bar keeps it: test above)."""
    w = make_world(policy={"follow_min_saving": 0.05, "follow_min_gap": "2h"})
    jid = w.submit(gpus="V100:1")
    w.tick()
    w.tick(3600)
    _reprice(w, 0.9, b=0.8)
    w.tick(60, n=5)
    assert not w.events("price_move")  # ran 1 h < the 2 h gap
    w.tick(3600)
    w.tick(n=3)
    assert len(w.events("price_move")) == 1
    assert w.attempts(jid)[-1].pool == POOL_B


def test_follow_threshold_rejects_a_negative_share():
    from pydantic import ValidationError

    from scheduler.core.config import PolicySettings

    with pytest.raises(ValidationError, match="follow_min_saving"):
        PolicySettings(follow_min_saving=-0.1)
