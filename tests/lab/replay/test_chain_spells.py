"""Leaving on-demand for spot charges the restart back to on-demand once per chain of spells
the spare slack allows (SpotwisePolicy._chain_spells), not once per spell."""

from __future__ import annotations

import pytest

from scheduler.core.policy import ON_DEMAND, SPOT
from scheduler.core.policy.spotwise import SpotwisePolicy
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(30)


def _on_demand(slack: float):
    # 40 h of work on on-demand ($3/h); pool `a` is up at $2.60/h. With the prior (spells of
    # ~10 h) finishing on spot takes about four spells; slack_if_launch is `slack`.
    return obs(work=40.0, deadline=40.5 + slack, overhead=0.5, placement=ON_DEMAND,
               prices={"a": 2.6}, od=3.0)  # fmt: skip


def _chain(policy: SpotwisePolicy, now) -> float:
    lam, _ = policy.model.rates("a")
    return policy._chain_spells(now, lam, policy._fallback_factor(now))


def test_with_slack_to_spare_the_way_back_is_shared_by_the_spells_it_ends() -> None:
    """A small saving per spot hour: charged a restart back to on-demand per spell, leaving
    on-demand does not pay; with slack for the restarts between the spells it does."""
    assert SpotwisePolicy().decide(_on_demand(slack=10.0)) == SPOT("a")
    # at the reserve every spell ends on on-demand: the old price, and the job stays
    assert SpotwisePolicy().decide(_on_demand(slack=2.0)) == ON_DEMAND


def test_the_chain_is_one_spell_at_the_reserve_and_at_most_the_spells_the_work_takes() -> None:
    policy = SpotwisePolicy()
    tight = _on_demand(slack=2.0)
    assert tight.slack_if_launch - tight.restart_overhead < policy._reserve(tight)
    assert _chain(policy, tight) == 1.0
    lam, _ = policy.model.rates("a")
    chains = [_chain(policy, _on_demand(slack=s)) for s in (2.0, 4.0, 6.0, 10.0, 50.0)]
    assert chains == sorted(chains)  # more slack, never fewer spells
    assert chains[-1] == pytest.approx(40.0 * lam)  # capped by the spells the work takes
