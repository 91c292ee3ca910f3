"""LocalMarket: the Provider that needs no cloud account.

Offerings come from the shipped catalog snapshot; spot availability and price are replayed
from a shipped real trace on a market clock that runs `speedup` times faster than the given
clock. Instances are local processes, each under a detached supervisor (see supervisor.py), so
they survive a daemon restart and a new LocalMarket over the same state_dir re-adopts them.

Spot pools the trace marks unavailable are left out of offerings() (like a cloud's current
capacity view); launching into one raises CapacityUnavailable(pool=...).

Clocks: with no clock (or a RealClock) everything is real UTC and the supervisors watch the
trace themselves, even while the daemon is down. With a ScaledClock (anything with `anchor`
and `speedup`) the timeline stays real but every reported time (seen_at, launched_at,
ended_at, notice_at, next_unavailability) is on that clock. With a simulated clock, market time
follows the clock and this object requests trace interruptions when it is called (describe,
list_tagged, poll); grace_period and kill_after are always real seconds.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from providers.base import (
    TAG_OWNER,
    CapacityUnavailable,
    EndReason,
    FatalError,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Offering,
    TransientError,
    pool_key,
)
from providers.local import state
from providers.local.catalog import CatalogRow, load_catalog
from providers.local.settings import LocalSettings
from providers.local.trace import DEFAULT_TRACE, Trace, load_trace

# Environment a job inherits from the daemon; everything else comes from the request, so the
# daemon's own secrets never reach a job (as on a fresh cloud instance).
ENV_PASSTHROUGH = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "PYTHONPATH", "VIRTUAL_ENV", "SHELL", "TERM",
)  # fmt: skip
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding `providers/`
_ORPHAN_AFTER_S = 60.0  # a spec with no supervisor after this long was a crashed launch
_SUPERVISOR_START_TIMEOUT_S = 30.0


class _Clock(Protocol):
    def now(self) -> datetime: ...


class _UTC:
    def now(self) -> datetime:
        return datetime.now(UTC)


def instance_id_for(token: str) -> str:
    """Deterministic, so a token maps to one instance directory and mkdir is the claim."""
    return "local-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class LocalMarket:
    """Provider over local processes; market time = trace_start + (now - epoch) * speedup."""

    name = "local"

    def __init__(self, settings: LocalSettings | None = None, clock: _Clock | None = None) -> None:
        self.settings = settings or LocalSettings()
        self._clock: _Clock = clock or _UTC()
        # The market's timeline (epoch, supervisors' records) is real time unless the clock is
        # simulated. A clock with `anchor` and `speedup` (scheduler.clock.ScaledClock) is real
        # time sped up: the timeline stays real and reported times are mapped onto the clock.
        self._scaled = clock is not None and hasattr(clock, "anchor") and hasattr(clock, "speedup")
        self._real = clock is None or type(clock).__name__ == "RealClock" or self._scaled
        self.state_dir = self.settings.resolved_state_dir()
        self.instances_dir = self.state_dir / "instances"
        self.trace: Trace = load_trace(self.settings.trace)
        # Supervisors watch the trace themselves only when market time is real time; under a
        # simulated clock this object requests the interruptions (describe/poll).
        self_watch = self._real
        try:
            self.instances_dir.mkdir(parents=True, exist_ok=True)
            epoch = state.ensure_epoch(self.state_dir, self._axis_now())
            self.time = state.MarketTime(epoch, self.settings.speedup, self._trace_start_s())
            state.write_json(
                self.state_dir / "market.json",
                {
                    "speedup": self.settings.speedup,
                    "trace": self.settings.trace,
                    "trace_start_s": self.time.trace_start_s,
                    "self_watch": self_watch,
                },
            )
        except OSError as e:
            raise FatalError(
                f"providers.local.state_dir {self.state_dir} is not usable: {e.strerror or e}"
            ) from e
        clouds, regions = self.settings.clouds, self.settings.regions
        self._rows = [
            r
            for r in load_catalog()
            if (clouds is None or r.cloud in clouds) and (regions is None or r.region in regions)
        ]
        self._by_key = {(r.cloud, r.zone, r.instance_type): r for r in self._rows}

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

    # -- Provider ----------------------------------------------------------------------------
    def offerings(self) -> list[Offering]:
        now = self._clock.now()
        tick = self._tick(now)
        out: list[Offering] = []
        for r in self._rows:
            out.append(self._offering(r, Market.ON_DEMAND, r.price, now))
            pool = pool_key(r.cloud, r.zone, r.instance_type, Market.SPOT)
            series = self.trace.series_for(pool)
            if self.trace.is_available(series, tick):
                price = round(r.spot_price * self.trace.price_factor(series, tick), 5)
                out.append(self._offering(r, Market.SPOT, price, now))
        return out

    @staticmethod
    def _offering(r: CatalogRow, market: Market, price: float, now: datetime) -> Offering:
        return Offering(
            cloud=r.cloud,
            region=r.region,
            zone=r.zone,
            instance_type=r.instance_type,
            gpu_model=r.gpu_model,
            gpu_count=r.gpu_count,
            gpu_memory_gb=r.gpu_memory_gb,
            vcpus=r.vcpus,
            memory_gb=r.memory_gb,
            market=market,
            price_per_hour=price,
            seen_at=now,
        )

    def launch(self, request: LaunchRequest) -> Instance:
        command = list(request.command)
        if not command or not all(isinstance(a, str) for a in command):
            raise FatalError("the job command must be a non-empty list of strings")
        off = request.offering
        row = self._by_key.get((off.cloud, off.zone, off.instance_type))
        if row is None:
            raise FatalError(
                f"the local market does not offer {off.instance_type} in {off.cloud}/{off.zone}"
            )
        instance_id = instance_id_for(request.token)
        if (self.instances_dir / instance_id).exists():
            return self._relaunch(instance_id)  # idempotent on the token
        now = self._clock.now()
        if off.market == Market.SPOT and not self.is_available(off.pool, now):
            raise CapacityUnavailable(f"no spot capacity in {off.pool} right now", pool=off.pool)
        instance_dir = self.instances_dir / instance_id
        env = {k: os.environ[k] for k in ENV_PASSTHROUGH if k in os.environ}
        # A "local instance" has the daemon's Python first on PATH, as a cloud image has one
        # Python with the trainer installed: `python -m trainer` works without activating a venv.
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
        env.update(request.env)
        env.update(
            SPOTWISE_CLOUD="local",
            SPOTWISE_NOTICE_FILE=str(instance_dir / state.NOTICE),
            SPOTWISE_INSTANCE_ID=instance_id,
        )
        spec: dict[str, Any] = {
            "id": instance_id,
            "token": request.token,
            "cloud": off.cloud,
            "region": row.region,
            "zone": off.zone,
            "instance_type": off.instance_type,
            "market": Market(off.market).value,
            "price_per_hour": off.price_per_hour,
            "command": command,
            "env": env,
            "tags": dict(request.tags),
            "created_at": now.isoformat(),
            "launch_offset_s": self._offset(now),
            "trace": self.trace.name,
            "series": self.trace.series_for(off.pool),
            "grace_s": self.settings.grace_period.total_seconds(),
            "kill_after_s": self.settings.kill_after.total_seconds(),
        }
        # Claim the token atomically: build the directory aside, then rename it into place.
        tmp = self.instances_dir / f".tmp-{instance_id}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.mkdir()
            state.write_json(tmp / state.SPEC, spec)
        except OSError as e:
            _rmtree(tmp)
            raise TransientError(f"cannot write local instance state: {e}") from e
        try:
            os.rename(tmp, instance_dir)
        except OSError:  # someone else launched this token first
            _rmtree(tmp)
            return self._relaunch(instance_id)
        self._start_supervisor(instance_dir)
        return self._describe_one(instance_id)

    def _relaunch(self, instance_id: str) -> Instance:
        """The token was launched before; finish a launch that crashed before its supervisor
        started (the supervisor itself refuses to run a job twice), else just report it."""
        d = self.instances_dir / instance_id
        fresh = _age_s(d / state.SPEC) < _ORPHAN_AFTER_S
        started = any((d / f).exists() for f in (state.SUPERVISOR, state.JOB, state.END))
        if fresh and not started and not state.supervisor_alive(d):
            self._start_supervisor(d)
        return self._describe_one(instance_id)

    def _start_supervisor(self, instance_dir: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        log = instance_dir / "supervisor.log"
        with open(log, "ab") as out:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "providers.local.supervisor", str(instance_dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    env=env,
                    cwd=instance_dir,
                    start_new_session=True,
                )
                rc = proc.wait(timeout=_SUPERVISOR_START_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise TransientError(f"local supervisor did not start: {e}") from e
        if rc != 0:
            tail = log.read_text(errors="replace")[-500:]
            raise TransientError(f"local supervisor failed (exit {rc}): {tail}")

    def describe(self, instance_ids: Sequence[str]) -> list[Instance]:
        return [self._describe_one(i) for i in instance_ids]

    def terminate(self, instance_ids: Sequence[str]) -> None:
        for i in instance_ids:
            d = self._dir(i)
            if d is None or (d / state.END).exists():
                continue
            state.create_once(d / state.TERMINATE, {"at": self._clock.now().isoformat()})

    def list_tagged(self, owner: str) -> list[Instance]:
        out = []
        for spec in self._specs(live_only=True):
            if spec.get("tags", {}).get(TAG_OWNER) != owner:
                continue
            inst = self._describe_one(spec["id"])
            if inst.state != InstanceState.ENDED:
                out.append(inst)
        return out

    def find_by_token(self, token: str) -> Instance | None:
        instance_id = instance_id_for(token)
        if not (self.instances_dir / instance_id).exists():
            return None
        return self._describe_one(instance_id)

    # -- extras for the daemon, the demo and tests -------------------------------------------
    def interrupt(self, instance_id: str) -> bool:
        """Force a cloud-style interruption now (notice, grace, SIGTERM, kill_after, SIGKILL),
        whatever the trace says. False if the instance is unknown or already ended."""
        d = self._dir(instance_id)
        if d is None or (d / state.END).exists():
            return False
        state.create_once(d / state.INTERRUPT, {"source": "manual"})
        return True

    def poll(self) -> list[str]:
        """Request trace-driven interruptions due by the clock; ids newly interrupted.
        Needed under a simulated clock (describe() and list_tagged() also do it)."""
        return [s["id"] for s in self._specs(live_only=True) if self._enforce_trace(s)]

    def prune(self, older_than: timedelta) -> int:
        """Delete the directories (logs included) of instances that ended more than
        `older_than` ago (real time); returns how many. Keeps a long-lived state_dir small."""
        cutoff = datetime.now(UTC) - older_than
        removed = 0
        for d in self.instances_dir.glob("local-*"):
            end = state.read_json(d / state.END)
            ended_at = _dt(end.get("ended_at")) if end else None
            if ended_at is not None and ended_at < cutoff:
                _rmtree(d)
                removed += 1
        return removed

    def instance_dir(self, instance_id: str) -> Path:
        """Where an instance's logs (stdout.log, stderr.log) and working directory live."""
        return self.instances_dir / instance_id

    # -- internals ---------------------------------------------------------------------------
    def _dir(self, instance_id: str) -> Path | None:
        if not instance_id.startswith("local-") or "/" in instance_id:
            return None
        d = self.instances_dir / instance_id
        return d if (d / state.SPEC).exists() else None

    def _specs(self, live_only: bool = False) -> list[dict[str, Any]]:
        specs = []
        for d in sorted(self.instances_dir.glob("local-*")):
            if live_only and (d / state.END).exists():
                continue
            spec = state.read_json(d / state.SPEC)
            if spec is not None:
                specs.append(spec)
        return specs

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

    def _describe_one(self, instance_id: str) -> Instance:
        d = self._dir(instance_id)
        spec = state.read_json(d / state.SPEC) if d else None
        if d is None or spec is None:
            return Instance(
                id=instance_id, cloud="local", region="", zone="", instance_type="",
                market=Market.SPOT, state=InstanceState.ENDED, end_reason=EndReason.UNKNOWN,
            )  # fmt: skip
        self._enforce_trace(spec)
        job = state.read_json(d / state.JOB) or {}
        end = state.read_json(d / state.END)
        notice = state.read_json(d / state.NOTICE)
        inst = Instance(
            id=instance_id,
            cloud=spec["cloud"],
            region=spec["region"],
            zone=spec["zone"],
            instance_type=spec["instance_type"],
            market=Market(spec["market"]),
            state=InstanceState.PENDING,
            tags=dict(spec["tags"]),
            launched_at=self._clock_from_real(_dt(job.get("started_at")))
            or _dt(spec["created_at"]),
            notice_at=self._clock_from_real(_dt(notice.get("noticed_at")) if notice else None),
        )
        if end is not None:
            inst.state = InstanceState.ENDED
            inst.end_reason = EndReason(end["reason"])
            inst.exit_code = end.get("exit_code")
            inst.ended_at = self._clock_from_real(_dt(end.get("ended_at")))
        elif state.supervisor_alive(d):
            inst.state = InstanceState.RUNNING if job else InstanceState.PENDING
        elif job or (d / state.SUPERVISOR).exists() or _age_s(d / state.SPEC) > _ORPHAN_AFTER_S:
            inst.state = InstanceState.ENDED  # the supervisor died without recording an end
            inst.end_reason = EndReason.UNKNOWN
        return inst


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


def _age_s(path: Path) -> float:
    try:
        return datetime.now().timestamp() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
