"""How often a job should checkpoint: as often as its pool deserves. Pure, no I/O.

Young/Daly: the interval that minimises the time lost to saving plus the work redone after
an interruption is about sqrt(2 x save time x mean time between interruptions). A riskier
pool or a faster save checkpoints more often; an on-demand instance (no interruptions)
saves at the longest interval. The daemon computes it from the pool's hazard
(scheduler.core.hazard) and the trainer's measured save time (progress.json's
`last_save_seconds`), passes it at launch and rewrites it in the store when it moves by more
than CHANGE_SHARE; the trainer follows it (`checkpoint_interval = "auto"`).
"""

from __future__ import annotations

import math
from datetime import timedelta

# Before the first save is measured.
DEFAULT_SAVE_SECONDS = 30.0
# Bounds: never more often than every two minutes (a save is not free even when fast), never
# less often than every six hours (a lost instance is not only an interruption).
MIN_INTERVAL = timedelta(minutes=2)
MAX_INTERVAL = timedelta(hours=6)
# The store is rewritten only when the interval moves by more than this share.
CHANGE_SHARE = 0.2


def young_daly(save_seconds: float, rate_per_hour: float) -> timedelta:
    """sqrt(2 x save x MTBI), within [MIN_INTERVAL, MAX_INTERVAL]."""
    save = save_seconds if save_seconds > 0 else DEFAULT_SAVE_SECONDS
    if rate_per_hour <= 0:
        return MAX_INTERVAL
    mtbi = 3600.0 / rate_per_hour
    seconds = math.sqrt(2.0 * save * mtbi)
    return min(max(timedelta(seconds=seconds), MIN_INTERVAL), MAX_INTERVAL)


def changed(old_seconds: float | None, new: timedelta) -> bool:
    """Whether `new` differs enough from what the job was told to tell it again."""
    if old_seconds is None or old_seconds <= 0:
        return True
    return abs(new.total_seconds() - old_seconds) > CHANGE_SHARE * old_seconds
