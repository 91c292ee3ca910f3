"""The clock a reader sees spend and times on: the local market's sped-up time when the
market is the only provider, real time otherwise.

Read commands and the API server read the market's epoch, never create it (a read writes
nothing); before any market ran, market time starts now. The daemon's own clock, which does
create the epoch, is `daemon.wiring.clock_for`.
"""

from __future__ import annotations

from scheduler.core.clock import Clock, RealClock, ScaledClock
from scheduler.core.errors import UserError
from scheduler.core.read_settings import ReadSettings


def read_only_clock(settings: ReadSettings) -> Clock:
    if settings.speedup == 1:
        return RealClock()
    from providers.local.layout import read_epoch

    epoch = read_epoch(settings.local_state_dir) or RealClock().now()
    try:
        return ScaledClock(epoch, settings.speedup)
    except ValueError as e:
        raise UserError(f"providers.local.speedup: {e}") from None
