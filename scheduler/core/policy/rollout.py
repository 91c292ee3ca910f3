"""Parallel rollout: which behaviour to follow now, judged by Monte Carlo on the learned model.

Where spotwise's own rule, greedy and Uniform Progress would do different kinds of thing (wait,
on-demand, spot), each candidate's action is taken now and the candidate's rule followed from
then on, over ROLLOUTS futures drawn from the learned two-state availability model of every
pool (the same futures for every candidate, so their difference is what the noise spares).
The one with the lowest expected cost wins. A rollout policy does, in its model, at least as
well as the best of its base policies (Bertsekas' parallel rollout); what the model misses
(non-exponential outages) is what the benchmark measures.

The rollouts use the job's own restart overhead, checkpoint interval (an interruption throws
away half an interval on average), remaining work, slack and prices, on a step of at least the
decision tick and at most MAX_STEPS steps to the deadline. Pure and seeded: the same inputs
give the same answer. Zone choice inside a rollout is by price inflated by expected losses for
every candidate (the candidates differ in when to wait, run on-demand or go back to spot, not
in which pool); migration charges are left out.

Off in spotwise (spotwise.ARBITER): on the train split it lost to the rule alone, where, on
on-demand, it sided with greedy's "stay for good": the exponential model, fitted to
flapping pools, did not foresee the long spells that followed
(docs/designs/deadline-policy-tuning-history.md#arbiter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .base import EPS, Action, ActionKind, Observation

# Futures drawn per evaluation: enough that a one-restart margin exceeds the noise, at
# about 10-30 ms per evaluation.
ROLLOUTS = 64
# Steps of at least one decision tick to the deadline: bounds the cost of a long job.
MAX_STEPS = 48
# Fixed, so the same inputs give the same verdict.
SEED = 20260
# Candidate names, in the order they are evaluated; the first one wins ties.
SPOTWISE, GREEDY, UP = "spotwise", "greedy", "uniform-progress"
CANDIDATES = (SPOTWISE, GREEDY, UP)

IDLE, OD = 0, 1  # row modes; 2 + z = spot in zone z


@dataclass(frozen=True)
class Model:
    """What the rollouts need of the learned pools and of spotwise's own rule."""

    zones: tuple[str, ...]
    loss_rate: np.ndarray  # (Z,) per hour while up
    return_rate: np.ndarray  # (Z,) per hour while down
    reserve_slope: float  # spotwise's reserve: tick + overhead + slope x work left
    switch: np.ndarray  # (4, Z): spotwise's on-demand -> spot gain terms, see _switch_terms
    rank: np.ndarray  # zone indices, preferred first


def encode(action: Action, zones: Sequence[str]) -> int:
    if action.kind is ActionKind.WAIT:
        return IDLE
    if action.kind is ActionKind.ON_DEMAND:
        return OD
    return 2 + zones.index(action.zone or "")


def expected_costs(obs: Observation, model: Model, first: Sequence[Action]) -> np.ndarray:
    """Mean cost (USD, from now to the end) of taking `first[c]` now and then following
    candidate c's rule (CANDIDATES order), over the same ROLLOUTS futures."""
    zones = model.zones
    nz = len(zones)
    n_c = len(first)
    r = ROLLOUTS
    rows = n_c * r
    time_left = obs.time_left
    dt = max(obs.tick_hours, time_left / MAX_STEPS)
    steps = max(1, math.ceil(time_left / dt - EPS))
    o, od = obs.restart_overhead, obs.on_demand_price
    lost = 0.5 * obs.checkpoint_interval
    risk = dt if obs.checkpoint_interval > 0 else 0.0
    # futures of every pool, shared by all candidates: (steps, R, Z)
    rng = np.random.default_rng(SEED)
    p_loss = 1.0 - np.exp(-model.loss_rate * dt)
    p_ret = 1.0 - np.exp(-model.return_rate * dt)
    u = rng.random((steps, r, nz))
    up = np.empty((steps, r, nz), dtype=bool)
    up[0] = np.array([bool(obs.spot_available.get(z, False)) for z in zones])
    for k in range(1, steps):
        up[k] = np.where(up[k - 1], u[k] >= p_loss, u[k] < p_ret)
    ranked = up[:, :, model.rank]
    any_up = np.tile(ranked.any(axis=2), (1, n_c))  # (steps, rows)
    zbest = np.tile(model.rank[np.argmax(ranked, axis=2)], (1, n_c))
    up_rows = np.tile(up, (1, n_c, 1))  # (steps, rows, Z)
    price = np.array([obs.spot_price.get(z, math.inf) for z in zones])
    rate_of = np.concatenate(([0.0, od], price))  # by action code
    per_hour, spell, fixed, back = model.switch
    c = _Consts(
        o, dt, risk, obs.work_total, obs.deadline, model.reserve_slope,
        np.repeat(np.arange(n_c), r), per_hour, spell, fixed, back,
    )  # fmt: skip

    cur = obs.placement
    mode = np.full(rows, IDLE if cur is None else encode(cur, zones), dtype=np.int64)
    roh = np.full(rows, obs.remaining_overhead if cur is not None else 0.0)
    w = np.full(rows, obs.remaining_work)
    cost = np.zeros(rows)
    done = w <= EPS
    act = np.repeat(np.array([encode(a, zones) for a in first]), r)
    ar = np.arange(rows)
    for k in range(steps):
        if k:
            on_spot = mode >= 2
            hit = on_spot & ~up_rows[k, ar, np.maximum(mode - 2, 0)]
            if hit.any():
                mode = np.where(hit, IDLE, mode)
                w = np.where(hit, w + lost, w)
                on_spot &= ~hit
            t = obs.elapsed + k * dt
            act = _rules(c, any_up[k], zbest[k], mode, on_spot, w, roh, t)
        run = (act != IDLE) & ~done
        roh = np.where(run & (act != mode), o, roh)
        spent_oh = np.where(run, np.minimum(roh, dt), 0.0)
        roh = roh - spent_oh
        progress = dt - spent_oh
        fin = run & (progress >= w - EPS)
        cost += np.where(run, rate_of[act] * np.where(fin, spent_oh + w, dt), 0.0)
        w = np.where(run, np.maximum(w - progress, 0.0), w)
        done |= fin
        mode = np.where(done | run, act, IDLE)
        if done.all():
            break
    late = ~done
    if late.any():
        oh = np.where(mode == OD, roh, o)
        cost += np.where(late, (w + oh) * od, 0.0)
    return cost.reshape(n_c, r).mean(axis=1)


@dataclass(frozen=True)
class _Consts:
    o: float
    dt: float
    risk: float
    work_total: float
    deadline: float
    reserve_slope: float
    cand: np.ndarray  # (rows,) candidate index
    per_hour: np.ndarray  # (Z,) switch-gain terms
    spell: np.ndarray
    fixed: np.ndarray
    back: np.ndarray


def _rules(
    c: _Consts,
    any_up: np.ndarray,
    zbest: np.ndarray,
    mode: np.ndarray,
    on_spot: np.ndarray,
    w: np.ndarray,
    roh: np.ndarray,
    t: float,
) -> np.ndarray:
    """Each row's next action under its candidate's rule: vectorised copies of spotwise's,
    greedy's and UP's decisions, without zone changes and migrations."""
    o, dt = c.o, c.dt
    tl = c.deadline - t
    spot_best = 2 + zbest
    s_launch = tl - w - o
    launch_spot = any_up & (s_launch - o - c.risk >= -EPS)
    safe_keep = tl - w - roh - o - c.risk >= -EPS
    can_wait = s_launch - dt >= -EPS
    on_od = mode == OD
    keep_or_od = np.where(safe_keep | (s_launch < -EPS), mode, OD)  # both, on spot

    # greedy
    g_idle = np.where(launch_spot, spot_best, np.where(~can_wait | any_up, OD, IDLE))
    g = np.where(on_od, OD, np.where(on_spot, keep_or_od, g_idle))

    # spotwise
    reserve = dt + o + c.reserve_slope * w
    gain = c.per_hour[zbest] * np.minimum(w, c.spell[zbest]) - c.fixed[zbest]
    gain -= np.where(c.spell[zbest] < w, c.back[zbest], 0.0)
    s_idle = np.where(
        launch_spot, spot_best, np.where(can_wait & (s_launch - dt >= reserve - EPS), IDLE, OD)
    )
    s_od = np.where(launch_spot & (gain > 0), spot_best, OD)
    s = np.where(on_od, s_od, np.where(on_spot, keep_or_od, s_idle))

    # uniform progress
    wt, dl = c.work_total, c.deadline
    done_w = wt - w
    has_spot = on_spot | any_up
    behind = done_w - t * wt / dl < -EPS
    stick = on_od & (~has_spot | ((t + 2 * o) * wt / dl - done_w >= -EPS))
    remaining = math.floor((tl + EPS) / dt) * dt
    force = (np.ceil((w + 2 * o) / dt - EPS) * dt > remaining + EPS) & ~on_spot
    want_od = (behind & ~has_spot) | stick | force
    want_spot = has_spot & ~stick & ~force
    last = np.ceil((w + o) / dt - EPS) * dt >= remaining - EPS
    keep = on_spot & (roh < 1e-3)
    want_spot = np.where(last, keep, want_spot)
    want_od = np.where(last, ~keep, want_od)
    u = np.where(want_od, OD, np.where(want_spot, np.where(on_spot, mode, spot_best), IDLE))
    return np.choose(c.cand, (s, g, u))
