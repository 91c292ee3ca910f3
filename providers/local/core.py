"""The local market's base: its state directory, its timeline and the instance records every
part of the market reads (MarketCore).

LocalMarket (market.py) is split by concern, the way the cloud adapters are split by resource,
each concern a class building on the ones before it:

    core.py           MarketCore: opening the state directory, market time and the clock
                      mappings, reading instance records, events
    interruptions.py  TraceInterruptions: spot capacity and interruptions from the trace
    observation.py    Observation: describe and terminate, and ending an instance nobody
                      supervises
    launching.py      Launching: launch, and the instance records a launch writes
    listing.py        Listing: tag listing, lookup by token, pruning ended instances
    market.py         LocalMarket: the Provider (name, capabilities, offerings) over all of them

Clocks: with no clock (or a RealClock) everything is real UTC and the supervisors watch the
trace themselves, even while the daemon is down. With a ScaledClock (anything with `anchor`
and `speedup`) the timeline stays real but every reported time (seen_at, launched_at,
ended_at, notice_at, next_unavailability) is on that clock. With a simulated clock, market time
follows the clock and the market requests trace interruptions when it is called (describe,
list_tagged, poll); grace_period and kill_after are always real seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import shutil
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from providers.adapter import Clock, EventQueue, UtcClock
from providers.base import Capabilities, EndReason, FatalError, ProviderEvent, ResourceRef
from providers.local import state
from providers.local.layout import INSTANCES_DIR, read_epoch
from providers.local.settings import LocalSettings
from providers.local.snapshot import load_catalog
from providers.local.trace import Trace, load_trace

_STALE_MARKER_S = 120.0  # a live marker without a directory: its launch died before the claim
_SPEC_CACHE_MAX = 4096
INSTANCE_ID = re.compile(r"local-[0-9a-f]{16}")


def instance_id_for(token: str) -> str:
    """Deterministic, so a token maps to one instance directory and mkdir is the claim."""
    return "local-" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_time(value: Any) -> datetime | None:
    """A recorded time; None when absent or damaged (never an exception)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


class MarketCore:
    """What every part of the local market shares: settings, clock, state directory, trace,
    catalog rows, the spec cache and the events. Market time = trace_start + (now - epoch) *
    speedup."""

    name: str
    capabilities: Capabilities

    def __init__(
        self,
        settings: LocalSettings | None = None,
        clock: Clock | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        """`read_only`: a market to read offerings and instances from, for commands that must
        not write: no directory, epoch or market.json is created (a market that never ran
        starts its time now, in memory only). Launching from it is a programming error."""
        self.settings = settings or LocalSettings()
        self.read_only = read_only
        self._clock: Clock = clock or UtcClock()
        # The market's timeline (epoch, supervisors' records) is real time unless the clock is
        # simulated. A clock with `anchor` and `speedup` (scheduler.core.clock.ScaledClock) is real
        # time sped up: the timeline stays real and reported times are mapped onto the clock.
        self._scaled = clock is not None and hasattr(clock, "anchor") and hasattr(clock, "speedup")
        self._real = clock is None or type(clock).__name__ == "RealClock" or self._scaled
        self.state_dir = self.settings.resolved_state_dir()
        self.instances_dir = self.state_dir / INSTANCES_DIR
        self.live_dir = self.state_dir / "live"
        self._spec_cache: dict[str, dict[str, Any]] = {}
        self._events = EventQueue(maxlen=None)
        self._warned: set[tuple[str, str]] = set()
        self.trace: Trace = load_trace(self.settings.trace)
        if read_only:
            epoch = read_epoch(self.state_dir) or self._axis_now()
            self.time = state.MarketTime(epoch, self.settings.speedup, self._trace_start_s())
        else:
            self.time = self._open_state_dir(self_watch=self._real)
        clouds, regions = self.settings.clouds, self.settings.regions
        self._rows = [
            r
            for r in load_catalog()
            if (clouds is None or r.cloud in clouds) and (regions is None or r.region in regions)
        ]
        self._by_key = {(r.cloud, r.zone, r.instance_type): r for r in self._rows}
        # A notice ends within grace_period + kill_after real seconds: in market time, sped up.
        real = self.settings.grace_period + self.settings.kill_after
        self.capabilities = dataclasses.replace(
            type(self).capabilities, notice_window=real * self.settings.speedup
        )

    def _open_state_dir(self, *, self_watch: bool) -> state.MarketTime:
        """Create the state directory's layout, set the epoch once, and record the market's
        settings for the supervisors. Supervisors watch the trace themselves (`self_watch`)
        only when market time is real time; under a simulated clock this object requests the
        interruptions (describe/poll)."""
        try:
            self.instances_dir.mkdir(parents=True, exist_ok=True)
            if not self.live_dir.is_dir():
                self._build_live_markers()
            epoch = state.ensure_epoch(self.state_dir, self._axis_now())
            time = state.MarketTime(epoch, self.settings.speedup, self._trace_start_s())
            state.write_json(
                self.state_dir / "market.json",
                {
                    "speedup": self.settings.speedup,
                    "trace": self.settings.trace,
                    "trace_start_s": time.trace_start_s,
                    "self_watch": self_watch,
                },
            )
        except OSError as e:
            raise FatalError(
                f"providers.local.state_dir {self.state_dir} is not usable: {e.strerror or e}"
            ) from e
        return time

    def _build_live_markers(self) -> None:
        """Once per state_dir (or after an upgrade): the hot set and the ended index from a
        full scan, published with one rename."""
        tmp = self.state_dir / f".live-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        ended_lines = []
        for d in sorted(self.instances_dir.glob("local-*")):
            end = read_end(d)
            if end is None:
                (tmp / d.name).touch()
                continue
            ended = parse_time(end.get("ended_at"))
            ts = ended.timestamp() if ended else _mtime(d)
            ended_lines.append(f"{ts:.3f} {d.name}")
        if ended_lines:
            state.append_line(self.state_dir / state.ENDED_INDEX, "\n".join(ended_lines))
        try:
            os.rename(tmp, self.live_dir)
        except OSError:  # another market built it first
            remove_tree(tmp)

    def _trace_start_s(self) -> float:
        ts = self.settings.trace_start
        if isinstance(ts, timedelta):
            return ts.total_seconds()
        return (ts - self.trace.start).total_seconds()  # inside the trace: settings check it

    # -- market time -------------------------------------------------------------------------
    def market_time(self, at: datetime | None = None) -> datetime:
        """Where on the trace's own time axis we are (the trace repeats after its end)."""
        return self.trace.start + timedelta(seconds=self._offset(at))

    def _offset(self, at: datetime | None = None) -> float:
        """Seconds into the trace at clock time `at` (default now)."""
        return self.time.offset(self._axis_now() if at is None else self._axis_from_clock(at))

    def _tick(self, at: datetime | None = None) -> int:
        return self.trace.tick(self._offset(at))

    # The timeline's axis vs the clock's: identical except under a ScaledClock.
    def _axis_now(self) -> datetime:
        return datetime.now(UTC) if self._real else self._clock.now()

    def _axis_from_clock(self, t: datetime) -> datetime:
        if not self._scaled:
            return t
        c: Any = self._clock
        return c.anchor + (t - c.anchor) / c.speedup

    def _clock_from_axis(self, t: datetime) -> datetime:
        if not self._scaled:
            return t
        c: Any = self._clock
        return c.anchor + (t - c.anchor) * c.speedup

    def _clock_from_real(self, t: datetime | None) -> datetime | None:
        """Supervisors stamp real time; report it on the caller's clock."""
        if t is None:
            return None
        if self._real:
            return self._clock_from_axis(t)
        return self._clock.now() - (datetime.now(UTC) - t)  # simulated clock: same age

    # -- instance records --------------------------------------------------------------------
    def instance_dir(self, instance_id: ResourceRef | str) -> Path:
        """Where an instance's logs (stdout.log, stderr.log) and working directory live."""
        return self.instances_dir / as_ref(instance_id).id

    def _locate(self, instance_id: str) -> Path | None:
        if not INSTANCE_ID.fullmatch(instance_id):
            return None
        d = self.instances_dir / instance_id
        return d if d.is_dir() else None

    def _spec(self, instance_id: str) -> dict[str, Any] | None:
        """A spec never changes once written: read it once per market object."""
        spec = self._spec_cache.get(instance_id)
        if spec is None:
            spec = state.read_json(self.instances_dir / instance_id / state.SPEC)
            if spec is not None:
                if len(self._spec_cache) >= _SPEC_CACHE_MAX:  # describes of old history
                    self._spec_cache.clear()
                self._spec_cache[instance_id] = spec
        return spec

    def _live_ids(self) -> list[str]:
        """Instances not yet known to have ended (the hot set); drops stale markers."""
        try:
            names = sorted(os.listdir(self.live_dir))
        except OSError as e:
            self._warn("live", f"cannot list {self.live_dir}: {e}")
            return []
        out = []
        for name in names:
            if not INSTANCE_ID.fullmatch(name):
                continue
            if self._locate(name) is not None:
                out.append(name)
            elif age_s(self.live_dir / name) > _STALE_MARKER_S:  # a launch died before its claim
                with contextlib.suppress(OSError):
                    (self.live_dir / name).unlink()
        return out

    # -- events ------------------------------------------------------------------------------
    def drain_events(self) -> list[ProviderEvent]:
        return self._events.drain()

    def _warn(self, key: str, message: str) -> None:
        """An event for the daemon's log, once per (instance, message) per market object."""
        if (key, message) in self._warned:
            return
        self._warned.add((key, message))
        self._events.put(ProviderEvent(f"local: {key}: {message}"))


def as_ref(r: ResourceRef | str) -> ResourceRef:
    return r if isinstance(r, ResourceRef) else ResourceRef(str(r))


def read_end(d: Path) -> dict[str, Any] | None:
    """end.json; a damaged one still means the instance ended (reason unknown)."""
    end = state.read_json(d / state.END)
    if end is None and (d / state.END).exists():
        return {"reason": EndReason.UNKNOWN.value}
    return end


def unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def age_s(path: Path) -> float:
    try:
        return datetime.now().timestamp() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
