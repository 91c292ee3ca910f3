"""LocalMarket: the Provider that needs no cloud account.

Offerings come from the shipped catalog snapshot; spot availability and price are replayed
from a shipped real trace on a market clock that runs `speedup` times faster than the given
clock. Instances are local processes, each under a detached supervisor (see supervisor.py), so
they survive a daemon restart and a new LocalMarket over the same state_dir re-adopts them.

Spot pools the trace marks unavailable are left out of offerings() (like a cloud's current
capacity view); launching into one raises CapacityUnavailable(pool=...).

Every call is safe to repeat and decided from the files alone (see state.py): an instance is
RUNNING only once its job process started, PENDING while its launch or supervisor may still
act, and an instance nobody supervises is settled by whoever looks (its job killed, its end
recorded). Listings walk only `live/` markers, so thousands of ended instances cost nothing.

Clocks: with no clock (or a RealClock) everything is real UTC and the supervisors watch the
trace themselves, even while the daemon is down. With a ScaledClock (anything with `anchor`
and `speedup`) the timeline stays real but every reported time (seen_at, launched_at,
ended_at, notice_at, next_unavailability) is on that clock. With a simulated clock, market time
follows the clock and this object requests trace interruptions when it is called (describe,
list_tagged, poll); grace_period and kill_after are always real seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from providers.adapter import Clock, EventQueue, UtcClock
from providers.base import (
    TAG_NODE,
    TAG_OWNER,
    Capabilities,
    CapacityUnavailable,
    EndReason,
    FailureKind,
    FatalError,
    Instance,
    InstanceState,
    LaunchFailure,
    LaunchRejected,
    LaunchRequest,
    Market,
    Offering,
    ProviderEvent,
    ResourceRef,
    TaggedResource,
    TransientError,
    not_found,
    pool_key,
)
from providers.local import state
from providers.local.settings import INSTANCES_DIR, LocalSettings
from providers.local.snapshot import CatalogRow, load_catalog
from providers.local.trace import DEFAULT_TRACE, Trace, load_trace

# Environment a job inherits from the daemon; everything else comes from the request, so the
# daemon's own secrets never reach a job (as on a fresh cloud instance).
ENV_PASSTHROUGH = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "SHELL",
    "TERM",
)
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding `providers/`
_SUPERVISOR_START_TIMEOUT_S = 30.0
_STALE_MARKER_S = 120.0  # a live marker without a directory: its launch died before the claim
_SPEC_CACHE_MAX = 4096
_ID = re.compile(r"local-[0-9a-f]{16}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_ARG_STRLEN = 128 * 1024  # Linux: one argv/env string, NUL included
_ARG_MAX = os.sysconf("SC_ARG_MAX") if hasattr(os, "sysconf") else 256 * 1024
_ENV_HEADROOM = 16 * 1024  # what the market adds (PATH, HOME, SPOTWISE_*)


GANG_NODE_DELAY_ENV = "SPOTWISE_LOCAL_GANG_NODE_DELAY_S"
"""Seconds the market waits between a gang's nodes (unset: none): a cloud that starts nodes
one by one, so a test can kill the daemon while only part of a gang exists."""


def _gang_node_pause() -> None:
    raw = os.environ.get(GANG_NODE_DELAY_ENV, "")
    with contextlib.suppress(ValueError):
        if float(raw) > 0:
            time.sleep(float(raw))


def instance_id_for(token: str) -> str:
    """Deterministic, so a token maps to one instance directory and mkdir is the claim."""
    return "local-" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _dt(value: Any) -> datetime | None:
    """A recorded time; None when absent or damaged (never an exception)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


class LocalMarket:
    """Provider over local processes; market time = trace_start + (now - epoch) * speedup."""

    name = "local"
    # Tags live in JSON: any value is stored as given. Instance ids derive from the token, so
    # a token is remembered for ever; placement groups are recorded, not enforced.
    capabilities = Capabilities(
        label_max_length=1 << 16,
        label_pattern=r"(?s:.)",
        idempotency_window=None,
        visibility_delay=timedelta(0),
        launch_completes_later=True,
        max_count=8,
        placement_groups=True,
        leaves_resources=False,
    )

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
            epoch = state.read_epoch(self.state_dir) or self._axis_now()
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
            end = _end_record(d)
            if end is None:
                (tmp / d.name).touch()
                continue
            ended = _dt(end.get("ended_at"))
            ts = ended.timestamp() if ended else _mtime(d)
            ended_lines.append(f"{ts:.3f} {d.name}")
        if ended_lines:
            state.append_line(self.state_dir / state.ENDED_INDEX, "\n".join(ended_lines))
        try:
            os.rename(tmp, self.live_dir)
        except OSError:  # another market built it first
            _rmtree(tmp)

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

    def launch(self, request: LaunchRequest) -> list[Instance]:
        """`request.count` instances, node i idempotent on `request.node_token(i)` (its id is
        derived from the token and creating its directory is the claim). Retrying after any
        failure, or after a crash, completes the same instances and never adds one."""
        command = self._validate(request)
        off = request.offering
        row = self._by_key.get((off.cloud, off.zone, off.instance_type))
        if row is None:
            raise FatalError(
                f"the local market does not offer {off.instance_type} in {off.cloud}/{off.zone}"
            )
        ids = [instance_id_for(request.node_token(n)) for n in range(request.count)]
        now = self._clock.now()
        fresh = not any(self._locate(i) for i in ids)  # a retry completes what exists
        if fresh and off.market == Market.SPOT and not self.is_available(off.pool, now):
            raise CapacityUnavailable(f"no spot capacity in {off.pool} right now", pool=off.pool)
        gang = self._gang_env(request, ids) if request.count > 1 else {}
        out: list[Instance] = []
        for node, iid in enumerate(ids):
            if self._locate(iid) is None and not self._has_capacity(off.pool):
                # All or nothing, as one RunInstances with MinCount=MaxCount: the nodes that
                # came up are terminated before the error is reported.
                with contextlib.suppress(TransientError):
                    self.terminate([ResourceRef(i) for i in ids[:node]])
                raise CapacityUnavailable(
                    f"only {node} of {request.count} {off.instance_type} in {off.zone} before "
                    f"the capacity error (the local capacity of {off.pool} is full)",
                    pool=off.pool,
                )
            env = {}
            if gang:  # torchrun's static rendezvous ranks the node by SPOTWISE_NODE_RANK
                env = {**gang, "SPOTWISE_NODE_RANK": str(node)}
            out.append(self._launch_node(request, row, node, iid, command, now, env))
            if gang and node < len(ids) - 1:
                _gang_node_pause()
        return out

    def _gang_env(self, request: LaunchRequest, ids: list[str]) -> dict[str, str]:
        """Node 0's rendezvous endpoint, on loopback: its port is picked once, when node 0
        launches, and a retry completing the gang reads it back from node 0's spec."""
        endpoint = request.env.get("SPOTWISE_RDZV_ENDPOINT", "")
        if not endpoint:
            spec0 = self._spec(ids[0]) if self._locate(ids[0]) else None
            endpoint = str(((spec0 or {}).get("env") or {}).get("SPOTWISE_RDZV_ENDPOINT", ""))
        if not endpoint:
            endpoint = f"127.0.0.1:{_free_port()}"
        return {"SPOTWISE_RDZV_ENDPOINT": endpoint, "SPOTWISE_NNODES": str(request.count)}

    def set_capacity(self, capacity: dict[str, int] | None) -> None:
        """How many live instances a pool holds (pool -> n, "*" for every pool); None lifts
        it. Read from a file at each launch, so a test or demo can change it under a running
        daemon, the way a real pool fills up."""
        path = self.state_dir / "capacity.json"
        if capacity is None:
            path.unlink(missing_ok=True)
        else:
            state.write_json(path, capacity)

    def _has_capacity(self, pool: str) -> bool:
        caps = state.read_json(self.state_dir / "capacity.json")
        if not isinstance(caps, dict):
            return True
        cap = caps.get(pool, caps.get("*"))
        if not isinstance(cap, int):
            return True
        used = 0
        for iid in self._live_ids():
            spec = self._spec(iid) or {}
            key = (spec.get("cloud"), spec.get("zone"), spec.get("instance_type"))
            if None in key or pool_key(*key, spec.get("market", "spot")) != pool:  # type: ignore[arg-type]
                continue
            if (self.instances_dir / iid / state.END).exists():
                continue
            used += 1
        return used < cap

    def _validate(self, request: LaunchRequest) -> list[str]:
        """LaunchRejected for a request no retry can fix (it would crash the job's exec)."""
        if (
            not isinstance(request.count, int)
            or not 1 <= request.count <= self.capabilities.max_count
        ):
            raise LaunchRejected(f"count must be 1..{self.capabilities.max_count}")
        cmd = request.command
        if isinstance(cmd, str | bytes) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise LaunchRejected("the job command must be a non-empty list of strings")
        command = list(cmd)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in request.env.items()):
            raise LaunchRejected("environment names and values must be strings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in request.tags.items()):
            raise LaunchRejected("tag keys and values must be strings")
        bad = sorted(k for k in request.env if not _ENV_NAME.fullmatch(k))
        if bad:
            raise LaunchRejected(f"invalid environment variable names: {bad!r}")
        size = 0
        for what, values in (("command", command), ("environment", list(request.env.values()))):
            for v in values:
                try:
                    n = len(os.fsencode(v))
                except UnicodeError:
                    raise LaunchRejected(f"the {what} has a string the OS cannot encode") from None
                if "\0" in v:
                    raise LaunchRejected(f"the {what} contains a NUL character")
                if n >= _MAX_ARG_STRLEN:
                    raise LaunchRejected(f"a {what} string is over {_MAX_ARG_STRLEN} bytes")
                size += n + 1
        size += sum(len(k) + 2 for k in request.env)
        if size > _ARG_MAX - _ENV_HEADROOM:
            raise LaunchRejected(f"command and environment are too large ({size} bytes)")
        return command

    def _launch_node(
        self,
        request: LaunchRequest,
        row: CatalogRow,
        node: int,
        instance_id: str,
        command: list[str],
        now: datetime,
        node_env: dict[str, str] | None = None,
    ) -> Instance:
        if self._locate(instance_id) is not None:
            return self._relaunch(instance_id)
        off = request.offering
        instance_dir = self.instances_dir / instance_id
        env = {k: os.environ[k] for k in ENV_PASSTHROUGH if k in os.environ}
        # A "local instance" has the daemon's Python first on PATH, as a cloud image has one
        # Python with the trainer installed: `python -m trainer` works without activating a venv.
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
        env.update(request.env)
        env.update(node_env or {})
        env.update(
            SPOTWISE_CLOUD="local",
            SPOTWISE_NOTICE_FILE=str(instance_dir / state.NOTICE),  # state.ENV_NOTICE_FILE
            SPOTWISE_INSTANCE_ID=instance_id,  # state.ENV_INSTANCE_ID
        )
        tags = dict(request.tags)
        tags.setdefault(TAG_NODE, str(node))
        spec: dict[str, Any] = {
            "id": instance_id,
            "token": request.node_token(node),
            "request_token": request.token,
            "node": node,
            "count": request.count,
            "placement_group": request.placement_group,  # simulated: recorded, no effect
            "cloud": off.cloud,
            "region": row.region,
            "zone": off.zone,
            "instance_type": off.instance_type,
            "market": Market(off.market).value,
            "price_per_hour": off.price_per_hour,
            "command": command,
            "env": env,
            "tags": tags,
            "created_at": now.isoformat(),
            "launch_offset_s": self._offset(now),
            "trace": self.trace.name,
            "series": self.trace.series_for(off.pool),
            "grace_s": self.settings.grace_period.total_seconds(),
            "kill_after_s": self.settings.kill_after.total_seconds(),
        }
        # Claim the token atomically: build the directory aside (holding its launch lock),
        # then rename it into place; the live marker comes first so listings never miss it.
        tmp = self.instances_dir / f".tmp-{instance_id}-{uuid.uuid4().hex[:8]}"
        lock: int | None = None
        try:
            tmp.mkdir()
            state.write_json(tmp / state.SPEC, spec)
            lock = state.try_lock(tmp / state.LAUNCH_LOCK)
            (self.live_dir / instance_id).touch()
        except OSError as e:
            _unlock(lock)
            _rmtree(tmp)
            raise TransientError(f"cannot write local instance state: {e}") from e
        try:
            try:
                os.rename(tmp, instance_dir)
            except OSError:  # someone else launched this token first
                _rmtree(tmp)
                _unlock(lock)
                lock = None
                return self._relaunch(instance_id)
            self._start_supervisor(instance_dir)
        finally:
            _unlock(lock)  # before describing: a launch that failed is decided right away
        return self._view(instance_id)

    def _relaunch(self, instance_id: str) -> Instance:
        """The token was launched before: finish a launch that died before its supervisor
        started, unless a launch is in progress or a verdict was recorded; then report it."""
        d = self.instances_dir / instance_id
        try:
            lock = state.try_lock(d / state.LAUNCH_LOCK)
        except OSError:
            lock = None
        if lock is not None:
            try:
                if not _started(d) and not state.supervisor_alive(d):
                    (self.live_dir / instance_id).touch()
                    self._start_supervisor(d)
            finally:
                _unlock(lock)
        return self._view(instance_id)

    def _start_supervisor(self, instance_dir: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        log = instance_dir / "supervisor.log"
        try:
            with open(log, "ab") as out:
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

    def describe(self, refs: Sequence[ResourceRef | str]) -> list[Instance]:
        """One Instance per ref; NOT_FOUND for ids this market never had (or pruned)."""
        return [self._view_safely(_ref(r)) for r in refs]

    def terminate(self, refs: Sequence[ResourceRef | str]) -> None:
        """Ask each supervisor to stop its job (SIGTERM, SIGKILL after kill_after). An
        unsupervised instance is decided here: its job's processes are killed. Instances
        that could not be asked are retried by raising TransientError after all others."""
        failed = []
        for r in refs:
            ref = _ref(r)
            d = self._locate(ref.id)
            try:
                if d is None or (d / state.END).exists():
                    continue
                state.create_once(d / state.TERMINATE, {"at": self._clock.now().isoformat()})
                self._view(ref.id, ref)  # settles an orphan or a dead launch now
            except Exception as e:  # one bad instance never fails the others
                failed.append(f"{ref.id}: {e}")
        if failed:
            raise TransientError(f"could not terminate {', '.join(failed)}")

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        """Live instances carrying spotwise-owner=owner. Ended ones are gone, as a cloud's
        terminated instances are; only the live markers are walked, never the history."""
        out = []
        for iid in self._live_ids():
            inst = self._view_safely(ResourceRef(iid))
            if inst.live and inst.tags.get(TAG_OWNER) == owner:
                created = _dt((self._spec(iid) or {}).get("created_at"))
                out.append(TaggedResource(inst.ref, dict(inst.tags), True, created))
        return out

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        """The instance of a single-node token, or the nodes of a gang's token family."""
        found = []
        if self._locate(instance_id_for(token)) is not None:
            found.append(self._view_safely(ResourceRef(instance_id_for(token))))
        else:
            for node in range(self.capabilities.max_count):
                iid = instance_id_for(LaunchRequest.node_token(_Family(token), node))  # type: ignore[arg-type]
                if self._locate(iid) is None:
                    break
                found.append(self._view_safely(ResourceRef(iid)))
        return [i for i in found if not region or not i.region or i.region == region]

    def drain_events(self) -> list[ProviderEvent]:
        return self._events.drain()

    # -- extras for the daemon, the demo and tests -------------------------------------------
    def interrupt(self, instance_id: ResourceRef | str) -> bool:
        """Force a cloud-style interruption now (notice, grace, SIGTERM, kill_after, SIGKILL),
        whatever the trace says. False if the instance is unknown or already ended."""
        d = self._locate(_ref(instance_id).id)
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

    def prune(self, older_than: timedelta) -> int:
        """Delete the directories (logs included) of instances that ended more than
        `older_than` ago (real time); returns how many. Reads only the ended index (no spec),
        and re-checks each candidate under its lock (ended, no live marker, unsupervised), so
        a live instance is never removed."""
        index = self.state_dir / state.ENDED_INDEX
        cutoff = time.time() - older_than.total_seconds()
        removed = 0
        for line in state.read_lines(index):
            parts = line.split()
            if len(parts) != 2 or not _ID.fullmatch(parts[1]):
                continue
            try:
                old = float(parts[0]) < cutoff
            except ValueError:
                continue
            d = self.instances_dir / parts[1]
            if old and d.is_dir() and self._remove_ended(d):
                removed += 1
                self._spec_cache.pop(parts[1], None)
        if removed:
            try:  # drop the entries whose directory is gone (and malformed ones)
                state.rewrite_lines(
                    index,
                    lambda ln: (
                        len(p := ln.split()) == 2
                        and _ID.fullmatch(p[1]) is not None
                        and (self.instances_dir / p[1]).is_dir()
                    ),
                )
            except OSError as e:
                self._warn("prune", f"cannot rewrite {index}: {e}")
        for left in self.instances_dir.glob(".t*-*"):  # launches that died before the claim,
            if left.name.startswith(".trash-") or _age_s(left) > 3600:  # prunes interrupted
                _rmtree(left)
        return removed

    def instance_dir(self, instance_id: ResourceRef | str) -> Path:
        """Where an instance's logs (stdout.log, stderr.log) and working directory live."""
        return self.instances_dir / _ref(instance_id).id

    # -- internals ---------------------------------------------------------------------------
    def _locate(self, instance_id: str) -> Path | None:
        if not _ID.fullmatch(instance_id):
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
            if not _ID.fullmatch(name):
                continue
            if self._locate(name) is not None:
                out.append(name)
            elif _age_s(self.live_dir / name) > _STALE_MARKER_S:  # a launch died before its claim
                with contextlib.suppress(OSError):
                    (self.live_dir / name).unlink()
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

    def _view_safely(self, ref: ResourceRef) -> Instance:
        """describe() of one instance that never raises: a damaged directory is reported (an
        event) and shown RUNNING while its supervisor or job lives, else ENDED/UNKNOWN."""
        try:
            return self._view(ref.id, ref)
        except Exception as e:
            self._warn(ref.id, f"unreadable instance state: {e!r}")
        d = self.instances_dir / ref.id
        alive = False
        with contextlib.suppress(Exception):
            alive = state.supervisor_alive(d) or state.kill_job(d, None)[1] > 0
        inst = not_found(ref, self.name)
        inst.state = InstanceState.RUNNING if alive else InstanceState.ENDED
        inst.end_reason = None if alive else EndReason.UNKNOWN
        return inst

    def _view(self, instance_id: str, ref: ResourceRef | None = None) -> Instance:
        ref = ref or ResourceRef(instance_id)
        d = self._locate(instance_id)
        if d is None:
            return not_found(ref, self.name)
        spec = self._spec(instance_id)
        if spec is None:
            self._warn(instance_id, "spec.json is missing or corrupt")
            spec = {}
        else:
            try:
                self._enforce_trace(spec)
            except (KeyError, TypeError, ValueError) as e:
                self._warn(instance_id, f"cannot follow the trace: {e!r}")
        job = state.read_json(d / state.JOB)
        end = _end_record(d)
        alive = end is None and state.supervisor_alive(d)
        if end is None and not alive:
            end = self._settle(instance_id, d)
            job = state.read_json(d / state.JOB)
        notice = state.read_json(d / state.NOTICE)
        inst = Instance(
            id=instance_id,
            cloud=spec.get("cloud", ""),
            region=spec.get("region", ref.region),
            zone=spec.get("zone", ref.zone),
            instance_type=spec.get("instance_type", ""),
            market=Market(spec.get("market", Market.ON_DEMAND.value)),
            state=InstanceState.PENDING,
            tags=dict(spec.get("tags", {})),
            # Billing starts when the job process started, not when the spec was written.
            launched_at=self._clock_from_real(_dt((job or {}).get("started_at"))),
            notice_at=self._clock_from_real(_dt((notice or {}).get("noticed_at"))),
            node=int(spec.get("node", 0)),
        )
        if end is not None:
            inst.state = InstanceState.ENDED
            inst.end_reason = _reason(end.get("reason"))
            inst.exit_code = end.get("exit_code")
            inst.ended_at = self._clock_from_real(_dt(end.get("ended_at")))
            failure = end.get("failure")
            if inst.end_reason is EndReason.LAUNCH_FAILED and isinstance(failure, dict):
                inst.failure = LaunchFailure(
                    FailureKind(failure.get("kind", FailureKind.FATAL.value)),
                    str(failure.get("message", "")),
                    inst.pool if inst.instance_type else None,
                )
            self._retire(instance_id, d, end)
        elif job is not None or (d / state.JOB).exists():
            # Only once the job process really started; without a supervisor only while its
            # processes survive being killed (otherwise _settle has recorded an end).
            inst.state = InstanceState.RUNNING
        return inst

    def _settle(self, instance_id: str, d: Path) -> dict[str, Any] | None:
        """Record the end of an instance nobody supervises, holding both its locks (so no
        launch or supervisor can start meanwhile); None while a launch or supervisor holds
        them (still PENDING/RUNNING). A job whose supervisor died is killed, whole group."""
        try:
            launch_lock = state.try_lock(d / state.LAUNCH_LOCK)
        except OSError:
            return _end_record(d)  # gone or read-only: report what is recorded
        if launch_lock is None:
            return None  # a launch is in progress: it may still complete
        try:
            sup_lock = state.try_lock(d / state.LOCK)
            if sup_lock is None:
                return None  # a supervisor owns it (it just started)
            try:
                end = _end_record(d)
                if end is not None:
                    return end
                job = state.read_json(d / state.JOB) or {}
                pgid = job.get("pid") if isinstance(job.get("pid"), int) else None
                ran = (d / state.JOB).exists() or (d / state.SUPERVISOR).exists()
                killed, left = state.kill_job(d, pgid) if ran else (0, 0)
                if left:  # unkillable (D state): it still runs, so it has not ended
                    self._warn(instance_id, f"{left} processes of an unsupervised job survive")
                    return None
                now = datetime.now(UTC).isoformat()
                if (d / state.JOB).exists() or killed:
                    end = {
                        "reason": EndReason.UNKNOWN.value,
                        "exit_code": None,
                        "ended_at": now,
                        "note": "the supervisor died; its job was killed",
                    }
                    if killed:
                        self._warn(instance_id, "supervisor died: killed its job's processes")
                elif (d / state.TERMINATE).exists():
                    end = {"reason": EndReason.TERMINATED.value, "exit_code": None, "ended_at": now}
                else:
                    why = (
                        "the supervisor died before starting the job"
                        if ran
                        else "the launch was interrupted before the job started"
                    )
                    failure = {"kind": FailureKind.FATAL.value, "message": why}
                    end = {
                        "reason": EndReason.LAUNCH_FAILED.value,
                        "exit_code": None,
                        "ended_at": now,
                        "failure": failure,
                    }
                try:
                    state.write_json(d / state.END, end)
                except OSError as e:  # a full disk: the verdict holds for this call
                    self._warn(instance_id, f"cannot record the end: {e}")
                return end
            finally:
                _unlock(sup_lock)
        finally:
            _unlock(launch_lock)

    def _retire(self, instance_id: str, d: Path, end: dict[str, Any]) -> None:
        """An ended instance leaves the hot set and enters the ended index (for prune)."""
        marker = self.live_dir / instance_id
        if not marker.exists():
            return
        try:
            ended = _dt(end.get("ended_at"))
            ts = ended.timestamp() if ended else time.time()
            state.append_line(self.state_dir / state.ENDED_INDEX, f"{ts:.3f} {instance_id}")
            marker.unlink(missing_ok=True)
        except (OSError, ValueError) as e:
            self._warn(instance_id, f"cannot retire: {e}")

    def _remove_ended(self, d: Path) -> bool:
        """Remove one ended, unsupervised instance; renamed away first so a concurrent
        describe sees it whole or NOT_FOUND, never half deleted (and never settles it)."""
        try:
            lock = state.try_lock(d / state.LOCK)
        except OSError:
            return False
        if lock is None:
            return False
        try:
            if not (d / state.END).exists() or (self.live_dir / d.name).exists():
                return False
            trash = self.instances_dir / f".trash-{d.name}-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(d, trash)
            except OSError:
                return False
        finally:
            _unlock(lock)
        _rmtree(trash)
        return True

    def _warn(self, key: str, message: str) -> None:
        """An event for the daemon's log, once per (instance, message) per market object."""
        if (key, message) in self._warned:
            return
        self._warned.add((key, message))
        self._events.put(ProviderEvent(f"local: {key}: {message}"))


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


class _Family:
    """A gang's token family, for LaunchRequest.node_token (one definition of node tokens)."""

    count = 2

    def __init__(self, token: str) -> None:
        self.token = token


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ref(r: ResourceRef | str) -> ResourceRef:
    return r if isinstance(r, ResourceRef) else ResourceRef(str(r))


def _started(d: Path) -> bool:
    return any((d / f).exists() for f in (state.SUPERVISOR, state.JOB, state.END))


def _end_record(d: Path) -> dict[str, Any] | None:
    """end.json; a damaged one still means the instance ended (reason unknown)."""
    end = state.read_json(d / state.END)
    if end is None and (d / state.END).exists():
        return {"reason": EndReason.UNKNOWN.value}
    return end


def _reason(value: Any) -> EndReason:
    try:
        return EndReason(value)
    except ValueError:
        return EndReason.UNKNOWN


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _age_s(path: Path) -> float:
    try:
        return datetime.now().timestamp() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
