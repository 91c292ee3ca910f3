"""Follow prices: whether a running attempt should move to a cheaper pool. Pure, no I/O.

A spot price that changes after launch changes what the job costs to finish. Moving is not
free (the old instance bills while it checkpoints, the new one pays the restart overhead and
redoes the work since the last checkpoint, and crossing regions may cost a transfer), so a
move happens only when
- the attempt runs on spot and its price has passed on-demand (leave regardless of how
  recently it moved: staying would cost more than the fallback every hour), or
- another adequate pool is clearly cheaper: the expected saving over the remaining work, net
  of the move cost, is at least MIN_SAVING of what staying would cost, and the attempt has run
  at least MIN_GAP since it started (a move starts a new attempt, so this is also the time
  since the previous move). Both bounds are the hysteresis that keeps prices hovering around
  each other from moving a job back and forth.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SAVING = 0.2  # share of the cost of staying that a move must save, net of its cost
MIN_GAP_HOURS = 0.5  # an attempt runs this long before a cheaper pool may pull it away


@dataclass(frozen=True, slots=True)
class Running:
    """The attempt as it runs now; rates are expected $ per hour of work (price inflated by
    the pool's interruption losses, `scheduler.core.placement.expected_cost` with one hour)."""

    pool: str
    spot: bool
    price: float  # current list price, $/h
    rate: float  # expected $/h of work on this pool
    ran_hours: float  # since the attempt started (= since the previous move)


@dataclass(frozen=True, slots=True)
class Alternative:
    """The best adequate pool other than the current one (`scheduler.core.placement.place`)."""

    pool: str
    price: float
    rate: float


@dataclass(frozen=True, slots=True)
class MoveCosts:
    restart_overhead_hours: float
    checkpoint_hours: float  # the old instance bills while it checkpoints and stops
    lost_work_hours: float  # ~ half the job's checkpoint interval
    migration_usd: float = 0.0  # one-off, e.g. moving the checkpoint across regions


@dataclass(frozen=True, slots=True)
class Move:
    reason: str
    old_price: float
    new_price: float
    saving_usd: float  # expected, net of the move cost


def move_cost(cur: Running, alt: Alternative, costs: MoveCosts) -> float:
    """$ a move costs: checkpoint time at the old price, overhead and redone work at the new."""
    redo = costs.restart_overhead_hours + costs.lost_work_hours
    return cur.price * costs.checkpoint_hours + alt.rate * redo + costs.migration_usd


def decide(
    cur: Running,
    alt: Alternative | None,
    on_demand_price: float | None,
    remaining_hours: float,
    costs: MoveCosts,
    min_saving: float = MIN_SAVING,
    min_gap_hours: float = MIN_GAP_HOURS,
) -> Move | None:
    """The move to make now, or None to stay."""
    if alt is None or alt.pool == cur.pool or remaining_hours <= 0:
        return None
    stay = cur.rate * remaining_hours
    go = alt.rate * remaining_hours + move_cost(cur, alt, costs)
    saving = stay - go
    if cur.spot and on_demand_price is not None and cur.price > on_demand_price:
        if alt.price >= cur.price:
            return None  # nowhere cheaper to go
        return Move(
            f"spot price ${cur.price:.2f}/h passed on-demand ${on_demand_price:.2f}/h",
            cur.price,
            alt.price,
            saving,
        )
    if cur.ran_hours < min_gap_hours or saving < min_saving * stay:
        return None
    return Move(
        f"{alt.pool} is {saving / stay:.0%} cheaper to finish, net of the move",
        cur.price,
        alt.price,
        saving,
    )
