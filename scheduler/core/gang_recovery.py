"""Replace the lost node, or re-place the gang: a pure decision by expected cost and time.

When k nodes of a running gang of N are taken back (or get the notice), training resumes by
one of two paths:

- **replace**: keep the N - k survivors (idle, billed), launch k replacements in the same
  pool, or, when it has no capacity, in the compatible pool the placement allows (the same
  zone and instance type, the other market), and every rank restarts from the last
  checkpoint in a new rendezvous round;
- **whole**: stop the survivors (billed while they drain) and place the gang again from
  nothing: N instances to boot and N images to pull, wherever placement finds room.

For the interval from the loss to training resumed, with `boot` a node's boot-to-training
time, `hazard` the pool's interruptions per node-hour and `capacity` whether the pool can
take the node now (0 or 1; 0.5 when it held fewer than N before a capacity error):

    replace  p    = capacity x exp(-N x hazard x boot)     (it comes up, no other loss meanwhile)
             wait = (N - k) x price + k x price_r           ($/h while the replacements boot)
             time = p x boot + capacity x (1 - e) x boot/2 + (1 - p) x whole.time
             usd  = p x wait x boot + capacity x (1 - e) x wait x boot/2 + (1 - p) x whole.usd
    whole    time = drain + place_wait + boot
             usd  = (N - k) x price x drain + N x price_w x boot

(`e` = exp(-N x hazard x boot): a loss during the boot comes on average half-way through it,
and then the gang is re-placed whole after all). Each path also leaves the gang in a pool
with some hazard for the rest of the run (the horizon, capped): N x hazard x horizon
interruptions, each a recovery of N x price x (boot + lost work). The score is dollars plus
time valued at the gang's own hourly price (N x price): an hour later is worth an hour of the
gang. The lower score wins; "replace" is never chosen where no pool can take the node, where
a boot would not fit the wait bound, or where every node was lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

# The longest stretch of the run the hazard term looks ahead: beyond a day the pool's learned
# rate says little, and a job whose work is unknown is weighed over this much.
HORIZON_HOURS = 24.0
# A pool that held fewer instances than the gang before a capacity error may still take one.
PARTIAL_CAPACITY = 0.5


class Recovery(StrEnum):
    """`[gangs] recovery`: how a running gang that lost nodes resumes."""

    AUTO = "auto"  # decide per loss, by expected cost and time
    REPLACE = "replace"  # replace the lost nodes wherever a pool can take them
    WHOLE = "whole"  # always re-place the gang whole (stop the survivors)


@dataclass(frozen=True, slots=True)
class Replacement:
    """Where the replacements would go."""

    pool: str
    price_per_hour: float  # per node
    capacity: float  # 1: the pool is offered and not marked; 0.5: held < N before; 0: none
    hazard_per_hour: float  # interruptions per node-hour there (learned, with the prior)


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """Where placement would put the whole gang now (the lost pool avoided, as after any
    interruption), or the gang's own pool and price when nothing else fits."""

    pool: str
    price_per_hour: float  # per node
    hazard_per_hour: float
    wait_hours: float = 0.0  # until some pool can take N (0: one can now)


@dataclass(frozen=True, slots=True)
class GangLoss:
    """One loss of a running gang, as the decision sees it."""

    nodes: int  # N
    lost: int  # k: nodes taken back or noticed, all replaced together
    price_per_hour: float  # per node, what the gang pays now
    hazard_per_hour: float  # the gang's pool
    boot_hours: float  # a new node, launch to training (the restart overhead)
    drain_hours: float  # the survivors, stopped, until they end (whole)
    wait_bound_hours: float  # the longest the survivors wait for a replacement
    replacement: Replacement | None  # None: no pool can take a replacement now
    elsewhere: Elsewhere
    remaining_hours: float | None = None  # the run's remaining hours, if known
    lost_work_hours: float = 0.0  # redone after each future interruption


@dataclass(frozen=True, slots=True)
class Estimate:
    hours: float  # expected, from the loss to training resumed
    usd: float  # expected spend in that interval
    risk_usd: float  # expected cost of the interruptions the path leaves ahead
    score: float


@dataclass(frozen=True, slots=True)
class Choice:
    replace: bool
    reason: str  # one line: which path and why, with the figures
    replace_estimate: Estimate | None
    whole_estimate: Estimate


def _whole(loss: GangLoss) -> Estimate:
    n, k, w = loss.nodes, loss.lost, loss.elsewhere
    hours = loss.drain_hours + w.wait_hours + loss.boot_hours
    usd = (n - k) * loss.price_per_hour * loss.drain_hours + n * w.price_per_hour * loss.boot_hours
    risk = _risk(loss, w.hazard_per_hour, w.price_per_hour)
    return Estimate(hours, usd, risk, _score(loss, hours, usd + risk))


def _replace(loss: GangLoss, r: Replacement, whole: Estimate) -> Estimate:
    n, k, boot = loss.nodes, loss.lost, loss.boot_hours
    survive = math.exp(-n * loss.hazard_per_hour * boot)
    p = r.capacity * survive
    torn = r.capacity * (1.0 - survive)  # a second loss during the boot: half-way, on average
    wait = (n - k) * loss.price_per_hour + k * r.price_per_hour
    hours = p * boot + torn * boot / 2 + (1.0 - p) * whole.hours
    usd = p * wait * boot + torn * wait * boot / 2 + (1.0 - p) * whole.usd
    risk = p * _risk(loss, r.hazard_per_hour, r.price_per_hour) + (1.0 - p) * whole.risk_usd
    return Estimate(hours, usd, risk, _score(loss, hours, usd + risk))


def _risk(loss: GangLoss, hazard: float, price: float) -> float:
    """Expected cost of the interruptions ahead in a pool with `hazard` per node-hour."""
    horizon = min(HORIZON_HOURS, loss.remaining_hours or HORIZON_HOURS)
    recoveries = loss.nodes * hazard * horizon
    return recoveries * loss.nodes * price * (loss.boot_hours + loss.lost_work_hours)


def _score(loss: GangLoss, hours: float, usd: float) -> float:
    return usd + loss.nodes * loss.price_per_hour * hours


def _figures(e: Estimate) -> str:
    return f"~{e.hours * 60:.1f} min and ~${e.usd:.2f} to resume"


def decide(loss: GangLoss, mode: Recovery = Recovery.AUTO) -> Choice:
    """Replace the lost nodes, or re-place the gang whole; the reason says which and why."""
    whole = _whole(loss)
    k, n = loss.lost, loss.nodes
    what = f"{k} of {n} nodes" if k > 1 else f"1 of {n} nodes"
    r = loss.replacement

    def whole_because(why: str, estimate: Estimate | None = None) -> Choice:
        return Choice(False, f"re-placing the gang whole: {why}", estimate, whole)

    if mode is Recovery.WHOLE:
        return whole_because("[gangs] recovery = whole")
    if k >= n:
        return whole_because("every node was lost")
    if r is None or r.capacity <= 0:
        return whole_because("no pool the placement allows can take a replacement now")
    if loss.boot_hours > loss.wait_bound_hours:
        return whole_because(
            f"a node boots in ~{loss.boot_hours * 60:.0f} min, past the "
            f"{loss.wait_bound_hours * 60:.0f} min wait bound"
        )
    rep = _replace(loss, r, whole)
    where = r.pool
    if mode is Recovery.REPLACE:
        return Choice(True, f"replacing {what} in {where} ([gangs] recovery = replace)", rep, whole)
    if rep.score <= whole.score:
        return Choice(
            True,
            f"replacing {what} in {where}: {_figures(rep)}, against {_figures(whole)} "
            f"re-placing the gang (hazard {loss.hazard_per_hour:.2f}/h per node)",
            rep,
            whole,
        )
    return whole_because(
        f"{_figures(whole)}, against {_figures(rep)} replacing {what} in {where} (hazard "
        f"{r.hazard_per_hour:.2f}/h per node there, {loss.elsewhere.hazard_per_hour:.2f}/h in "
        f"{loss.elsewhere.pool})",
        rep,
    )
