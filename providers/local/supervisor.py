"""Per-instance supervisor: runs one job and plays the cloud's part for it.

Started detached (own session) by LocalMarket.launch as `python -m providers.local.supervisor
<instance_dir>`, so jobs outlive the daemon. It holds an flock on supervisor.lock while alive,
records the job's pid and end, and delivers interruptions the way clouds do: the notice file,
then SIGTERM to the job's process group after the grace period, then SIGKILL after kill_after.
Interruptions come from the trace (when the market runs on real time), from an
interrupt.request file (the daemon-side market or a test), or terminate.request (no notice).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from providers.local import state
from providers.local.trace import load_trace

POLL_S = 0.2  # request files and job exit; cheap: two stat() calls
TRACE_POLL_S = 0.5


def _now() -> datetime:
    return datetime.now(UTC)


class Supervisor:
    def __init__(self, instance_dir: Path, spec: dict[str, Any]) -> None:
        self.dir = instance_dir
        self.spec = spec
        self.state_dir = instance_dir.parent.parent
        self.grace = float(spec["grace_s"])
        self.kill_after = float(spec["kill_after_s"])
        self.stop_requested = False
        self._trace_checked = 0.0
        self._outage_cache: tuple[Any, int | None] | None = None

    # -- job ---------------------------------------------------------------------------------
    def start(self) -> subprocess.Popen[bytes] | None:
        work = self.dir / "work"
        work.mkdir(exist_ok=True)
        with open(self.dir / "stdout.log", "ab") as out, open(self.dir / "stderr.log", "ab") as err:
            try:
                proc = subprocess.Popen(
                    list(self.spec["command"]),
                    env=dict(self.spec["env"]),
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,  # own process group: signals reach its children
                )
            except OSError as e:
                msg = f"spotwise-local: cannot start {self.spec['command'][0]!r}: {e}\n"
                err.write(msg.encode())
                code = 126 if isinstance(e, PermissionError) else 127
                state.write_json(self.dir / state.END, self._end("exited", code))
                return None
        state.write_json(self.dir / state.JOB, {"pid": proc.pid, "started_at": _now().isoformat()})
        return proc

    def _end(self, reason: str, exit_code: int | None) -> dict[str, Any]:
        return {"reason": reason, "exit_code": exit_code, "ended_at": _now().isoformat()}

    # -- interruption sources ----------------------------------------------------------------
    def trace_outage(self) -> bool:
        """True once the trace has taken this spot pool's capacity away since launch."""
        if self.spec["market"] != "spot":
            return False
        t = time.monotonic()
        if t - self._trace_checked < TRACE_POLL_S:
            return False
        self._trace_checked = t
        loaded = state.load_market(self.state_dir)
        if loaded is None:
            return False
        mt, cfg = loaded
        if not cfg.get("self_watch", False):
            return False  # a simulated clock drives the market; the daemon side requests it
        trace = load_trace(self.spec["trace"])
        key = (mt, self.spec["trace"])
        if self._outage_cache is None or self._outage_cache[0] != key:
            launch_tick = trace.tick(float(self.spec["launch_offset_s"]))
            self._outage_cache = (key, trace.next_outage(self.spec["series"], launch_tick))
        outage = self._outage_cache[1]
        return outage is not None and trace.tick(mt.offset(_now())) >= outage

    # -- the loop ----------------------------------------------------------------------------
    def run(self, proc: subprocess.Popen[bytes]) -> None:
        reason: str | None = None
        term_at: float | None = None  # monotonic deadlines
        kill_at: float | None = None
        pgid = proc.pid
        while proc.poll() is None:
            now = time.monotonic()
            terminate = self.stop_requested or (self.dir / state.TERMINATE).exists()
            if reason is None and terminate:
                reason, term_at = "terminated", now
            elif reason is None and ((self.dir / state.INTERRUPT).exists() or self.trace_outage()):
                reason, term_at = "interrupted", now + self.grace
                noticed = _now()
                state.write_json(
                    self.dir / state.NOTICE,
                    {
                        "action": "terminate",
                        "time": (noticed + timedelta(seconds=self.grace)).isoformat(),
                        "noticed_at": noticed.isoformat(),
                    },
                )
            elif reason == "interrupted" and terminate and term_at is not None:
                term_at = min(term_at, now)  # a terminate during the notice cuts it short
            if term_at is not None and now >= term_at:
                _killpg(pgid, signal.SIGTERM)
                term_at, kill_at = None, now + self.kill_after
            if kill_at is not None and now >= kill_at:
                _killpg(pgid, signal.SIGKILL)
                kill_at = None
            timeout = POLL_S
            for deadline in (term_at, kill_at):
                if deadline is not None:
                    timeout = min(timeout, max(deadline - now, 0.0))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(timeout, 0.005))
        rc = proc.returncode
        _killpg(pgid, signal.SIGKILL)  # the instance is gone: nothing of the job outlives it
        exit_code = rc if rc >= 0 else 128 - rc
        state.write_json(self.dir / state.END, self._end(reason or "exited", exit_code))


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def main(argv: list[str]) -> int:
    instance_dir = Path(argv[1]).resolve()
    spec = state.read_json(instance_dir / state.SPEC)
    if spec is None:
        print(f"no spec in {instance_dir}", file=sys.stderr)
        return 2
    lock_fd = os.open(instance_dir / state.LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another supervisor already owns this instance
    if (instance_dir / state.END).exists() or (instance_dir / state.JOB).exists():
        return 0  # already ran once; never start the job twice
    # Daemonize: the launcher reaps the parent once the job is started; the child (which
    # shares the locked file description) is re-parented and outlives the daemon.
    r, w = os.pipe()
    if os.fork() > 0:
        os.close(w)
        os.read(r, 1)
        return 0
    os.close(r)
    sup = Supervisor(instance_dir, spec)
    signal.signal(signal.SIGTERM, lambda *_: setattr(sup, "stop_requested", True))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state.write_json(
        instance_dir / state.SUPERVISOR, {"pid": os.getpid(), "started_at": _now().isoformat()}
    )
    proc = sup.start()
    os.close(w)  # the launcher may return now
    if proc is not None:
        sup.run(proc)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    os._exit(code)
