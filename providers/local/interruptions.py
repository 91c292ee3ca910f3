"""Spot capacity and interruptions replayed from the trace (TraceInterruptions).

A spot instance is interrupted when the trace takes its pool's capacity away after its
launch: the market writes an interrupt request and the instance's supervisor carries it out
(notice, grace, SIGTERM, kill_after, SIGKILL). Under real time the supervisors watch the trace
themselves; under a simulated clock describe(), list_tagged() and poll() request what is due.
"""

from __future__ import annotations

import contextlib
import math
from datetime import datetime, timedelta
from typing import Any

from providers.base import Market, ResourceRef
from providers.local import state
from providers.local.core import MarketCore, as_ref
from providers.local.trace import DEFAULT_TRACE, load_trace


class TraceInterruptions(MarketCore):
    """Whether a spot pool has capacity now, when it loses it, and the interruptions due."""

    def is_available(self, pool: str, at: datetime | None = None) -> bool:
        if pool.endswith("/" + Market.ON_DEMAND.value):
            return True
        return self.trace.is_available(self.trace.series_for(pool), self._tick(at))

    def next_unavailability(self, pool: str, after: datetime | None = None) -> datetime | None:
        """Clock time at which the trace next takes this spot pool's capacity away (an
        available -> unavailable edge strictly after `after`); None for on-demand pools."""
        if pool.endswith("/" + Market.ON_DEMAND.value):
            return None
        tick = self._tick(after)
        outage = self.trace.next_outage(self.trace.series_for(pool), tick)
        if outage is None:
            return None
        return self._clock_from_axis(self.time.real_time_of(self.trace.offset_of_tick(outage)))

    def interrupt(self, instance_id: ResourceRef | str) -> bool:
        """Force a cloud-style interruption now (notice, grace, SIGTERM, kill_after, SIGKILL),
        whatever the trace says. False if the instance is unknown or already ended."""
        d = self._locate(as_ref(instance_id).id)
        if d is None or (d / state.END).exists():
            return False
        state.create_once(d / state.INTERRUPT, {"source": "manual"})
        return True

    def poll(self) -> list[str]:
        """Request trace-driven interruptions due by the clock; ids newly interrupted.
        Needed under a simulated clock (describe() and list_tagged() also do it)."""
        out = []
        for iid in self._live_ids():
            spec = self._spec(iid)
            with contextlib.suppress(Exception):
                if spec is not None and self._enforce_trace(spec):
                    out.append(iid)
        return out

    def _enforce_trace(self, spec: dict[str, Any]) -> bool:
        if spec["market"] != Market.SPOT.value or spec["trace"] != self.trace.name:
            return False
        d = self.instances_dir / spec["id"]
        if (d / state.END).exists() or (d / state.INTERRUPT).exists():
            return False
        launch_tick = self.trace.tick(float(spec["launch_offset_s"]))
        outage = self.trace.next_outage(spec["series"], launch_tick)
        if outage is None or self._tick() < outage:
            return False
        return state.create_once(d / state.INTERRUPT, {"source": "trace"})


def suggest_trace_start(
    pool: str,
    lead: timedelta,
    trace: str = DEFAULT_TRACE,
    after: timedelta = timedelta(0),
) -> timedelta:
    """A trace_start at which `pool` has spot capacity and loses it `lead` (market time) later,
    at or after offset `after`: lets a demo or test see an interruption early."""
    t = load_trace(trace)
    series = t.series_for(pool)
    need = max(1, math.ceil(lead.total_seconds() / t.gap_seconds))
    tick = t.tick(after.total_seconds()) + need
    for _ in range(t.n_ticks):
        outage = t.next_outage(series, tick - 1)
        if outage is None:
            break
        if all(t.is_available(series, k) for k in range(outage - need, outage)):
            return timedelta(seconds=t.offset_of_tick(outage)) - lead
        tick = outage + need
    raise ValueError(f"trace {trace} has no outage for {pool} preceded by {lead} of capacity")
