"""A tight deadline paces all of its slack (UP's line) instead of PACE's share of it: with a
few hours to spare, an outage waited out early leaves nothing for the restarts later."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

import scheduler.core.policy.spotwise as spotwise
from scheduler.core.policy import ON_DEMAND, WAIT, get_policy
from scheduler.lab.replay import bench_settings, scenarios
from scheduler.lab.replay.sim import simulate
from scheduler.lab.replay.split import Split
from tests.support.replay import obs

pytestmark = pytest.mark.timeout(120)


def test_the_pace_share_ramps_from_pace_to_the_whole_slack() -> None:
    share = spotwise.pace_share
    assert share(1.0) == share(spotwise.TIGHT_HI) == pytest.approx(spotwise.PACE)
    assert share(0.0) == share(spotwise.TIGHT_LO) == pytest.approx(1.0)
    ramp = [share(x) for x in np.linspace(0.0, 0.3, 31)]
    assert all(a >= b for a, b in pairwise(ramp))  # continuous, monotone
    step = (1 - spotwise.PACE) * 0.01 / (spotwise.TIGHT_HI - spotwise.TIGHT_LO)
    assert max(abs(a - b) for a, b in pairwise(ramp)) < step + 1e-9  # no jumps


def _outage_early(deadline: float):
    # 96 h job, 0.5 h restarts, 1 h in with 0.5 h done, spot down: 3.8 h of slack left.
    return obs(elapsed=1.0, done=0.5, work=96.0, deadline=deadline, overhead=0.5,
               avail={"a": False}, od=3.0)  # fmt: skip


def test_a_tight_deadline_runs_on_demand_through_an_early_outage() -> None:
    """1.05x: PACE's half of the slack (2.7 h reserve) would wait this outage out; the whole
    slack paced (4.9 h) is already below it, so the job runs on-demand."""
    assert get_policy("spotwise").decide(_outage_early(100.8)) == ON_DEMAND


def test_an_ample_deadline_still_waits_the_same_outage_out(monkeypatch) -> None:
    assert get_policy("spotwise").decide(_outage_early(192.0)) == WAIT
    # and the tight job did wait under PACE alone (the behaviour this replaced)
    monkeypatch.setattr(spotwise, "TIGHT_LO", -2.0)
    monkeypatch.setattr(spotwise, "TIGHT_HI", -1.0)
    assert get_policy("spotwise").decide(_outage_early(100.8)) == WAIT


def _mean_cost(setting: scenarios.Setting) -> tuple[float, int]:
    costs, misses = [], 0
    for case in setting.cases:
        for win, past in scenarios._windows_with_history(case):
            out = simulate(win, case.job, get_policy("spotwise"), history=past)
            costs.append(out.cost)
            misses += not out.met_deadline
    return float(np.mean(costs)), misses


@pytest.mark.slow
def test_tight_pacing_costs_less_on_the_train_split(monkeypatch) -> None:
    """The cell it was tuned on (train split, 0.1 h overhead, 1.05x): cheaper, no misses."""
    (cell,) = [s for s in bench_settings.sweep(Split.TRAIN) if s.key == "sweep o=0.1 slack=1.05"]
    tight, tight_misses = _mean_cost(cell)
    monkeypatch.setattr(spotwise, "TIGHT_LO", -2.0)
    monkeypatch.setattr(spotwise, "TIGHT_HI", -1.0)
    paced, paced_misses = _mean_cost(cell)
    assert tight_misses == paced_misses == 0
    assert tight < paced * 0.995
