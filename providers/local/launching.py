"""Launching local instances (Launching): validating the request, writing the instance's
records and starting its detached supervisor.

A launch is idempotent on its token: the instance id derives from the token, and renaming the
prepared directory into place is the claim, so a retry (after any failure, or a crash)
completes the same instances and never adds one. A gang is all or nothing, as one
RunInstances with MinCount=MaxCount: nodes that came up are terminated before a capacity
error is reported. Only the job's own environment (ENV_PASSTHROUGH, the request's env) reaches
it, never the daemon's secrets.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from providers.base import (
    TAG_NODE,
    CapacityUnavailable,
    FatalError,
    Instance,
    LaunchRejected,
    LaunchRequest,
    Market,
    ResourceRef,
    TransientError,
    pool_key,
)
from providers.local import state
from providers.local.core import instance_id_for, remove_tree, unlock
from providers.local.observation import Observation
from providers.local.snapshot import CatalogRow

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


class Launching(Observation):
    """launch() and what it writes: the spec, the live marker, the supervisor's start."""

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
        gang = self._gang_env(request, ids) if request.gang else {}
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
            rank = request.node_of(node)
            if gang:  # torchrun's static rendezvous ranks the node by SPOTWISE_NODE_RANK
                env = {**gang, "SPOTWISE_NODE_RANK": str(rank)}
            out.append(self._launch_node(request, row, rank, iid, command, now, env))
            if gang and node < len(ids) - 1:
                _gang_node_pause()
        return out

    def _gang_env(self, request: LaunchRequest, ids: list[str]) -> dict[str, str]:
        """Node 0's rendezvous endpoint, on loopback: its port is picked once, when node 0
        launches, and a retry completing the gang reads it back from node 0's spec. A node
        launched alone to replace a lost one keeps the gang's size; it needs an endpoint
        of its own only as node 0 (the others read node 0's from the checkpoint store)."""
        if request.gang_node is not None:
            size = request.env.get("SPOTWISE_NNODES", "")
            env = {"SPOTWISE_NNODES": size} if size else {}
            if request.gang_node != 0:
                return env
        else:
            env = {"SPOTWISE_NNODES": str(request.count)}
        endpoint = request.env.get("SPOTWISE_RDZV_ENDPOINT", "")
        if not endpoint:
            spec0 = self._spec(ids[0]) if self._locate(ids[0]) else None
            endpoint = str(((spec0 or {}).get("env") or {}).get("SPOTWISE_RDZV_ENDPOINT", ""))
        if not endpoint:
            endpoint = f"127.0.0.1:{_free_port()}"
        return {**env, "SPOTWISE_RDZV_ENDPOINT": endpoint}

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
            unlock(lock)
            remove_tree(tmp)
            raise TransientError(f"cannot write local instance state: {e}") from e
        try:
            try:
                os.rename(tmp, instance_dir)
            except OSError:  # someone else launched this token first
                remove_tree(tmp)
                unlock(lock)
                lock = None
                return self._relaunch(instance_id)
            self._start_supervisor(instance_dir)
        finally:
            unlock(lock)  # before describing: a launch that failed is decided right away
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
                unlock(lock)
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


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _started(d: Path) -> bool:
    return any((d / f).exists() for f in (state.SUPERVISOR, state.JOB, state.END))
