"""Per-instance supervisor: runs one job and plays the cloud's part for it.

Started detached (own session) by LocalMarket.launch as `python -m providers.local.supervisor
<instance_dir>`, so jobs outlive the daemon. It holds an flock on supervisor.lock while alive,
records the job's pid and end, and delivers interruptions the way clouds do: the notice file,
then SIGTERM to the job's process group after the grace period, then SIGKILL after kill_after.
Interruptions come from the trace (when the market runs on real time), from an
interrupt.request file (the daemon-side market or a test), or terminate.request (no notice).

Nothing of the job may outlive its supervisor (a second attempt would run beside it on the
same checkpoints): the job's leader gets PR_SET_PDEATHSIG (Linux), any exception in the loop
kills the job's group, and the market kills what is left of a job whose supervisor died.
When the job ends, its exit code goes to end.json and, as the cloud wrapper would write it,
to exits/<attempt>.json in the job's (local) checkpoint store.
"""

from __future__ import annotations

import contextlib
import ctypes
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
from trainer import contract

POLL_S = 0.2  # request files and job exit; cheap: two stat() calls
TRACE_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Any:
    """A preexec_fn: SIGKILL the job's leader when this supervisor dies (Linux only). libc is
    loaded here, before fork; the child only calls into it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None  # the market's sweep still kills an orphaned job
    parent = os.getpid()

    def preexec() -> None:
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the supervisor died before prctl: do not run at all
            os._exit(1)

    return preexec


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
        self._trace_error_shown = False

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
                    preexec_fn=_die_with_parent(),
                )
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                msg = f"spotwise-local: cannot start {self.spec['command'][0]!r}: {e}\n"
                err.write(msg.encode())
                code = 126 if isinstance(e, PermissionError) else 127
                self.finish("exited", code)
                return None
        try:
            state.write_json(
                self.dir / state.JOB, {"pid": proc.pid, "started_at": _now().isoformat()}
            )
        except BaseException:
            _killpg(proc.pid, signal.SIGKILL)  # a job nobody can find must not run
            proc.wait()
            raise
        return proc

    def finish(self, reason: str, exit_code: int | None) -> None:
        """Record the end: the exit record first, so whoever sees end.json finds it too."""
        if exit_code is not None:
            try:
                write_exit_record(dict(self.spec["env"]), self.dir / "work", exit_code)
            except Exception as e:  # never lose end.json over the checkpoint store
                print(f"spotwise-local: cannot write the exit record: {e}", file=sys.stderr)
        state.write_json(self.dir / state.END, self._end(reason, exit_code))

    def _end(self, reason: str, exit_code: int | None) -> dict[str, Any]:
        return {"reason": reason, "exit_code": exit_code, "ended_at": _now().isoformat()}

    # -- interruption sources ----------------------------------------------------------------
    def trace_outage(self) -> bool:
        """True once the trace has taken this spot pool's capacity away since launch. A
        market.json being rewritten (or damaged) reads as "no outage yet", never kills the job."""
        try:
            return self._trace_outage()
        except Exception as e:
            if not self._trace_error_shown:
                self._trace_error_shown = True
                print(f"spotwise-local: cannot read the trace state: {e!r}", file=sys.stderr)
            return False

    def _trace_outage(self) -> bool:
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
        try:
            self._run(proc)
        finally:
            _killpg(
                proc.pid, signal.SIGKILL
            )  # the instance is gone: nothing of the job outlives it

    def _run(self, proc: subprocess.Popen[bytes]) -> None:
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
                try:  # a full disk loses the notice, never the interruption
                    state.write_json(
                        self.dir / state.NOTICE,
                        {
                            "action": "terminate",
                            "time": (noticed + timedelta(seconds=self.grace)).isoformat(),
                            "noticed_at": noticed.isoformat(),
                        },
                    )
                except OSError as e:
                    print(f"spotwise-local: cannot write the notice: {e}", file=sys.stderr)
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
        _killpg(pgid, signal.SIGKILL)
        self.finish(reason or "exited", rc if rc >= 0 else 128 - rc)


def write_exit_record(env: dict[str, str], work: Path, exit_code: int) -> None:
    """exits/<N>.json in the job's checkpoint store (N = $SPOTWISE_ATTEMPT), as a cloud
    instance's wrapper writes it; local stores only (s3 is the trainer's own business)."""
    uri, attempt = env.get(contract.ENV_CHECKPOINT_URI), contract.my_attempt(env)
    if not uri or attempt is None:
        return
    try:
        loc = contract.parse_uri(uri)
    except ValueError:
        return
    if not loc.is_local:
        return
    path = work / loc.file(contract.exit_name(attempt))  # relative: as the job saw it
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(contract.exit_doc(attempt, exit_code, contract.my_job(env)))
    os.replace(tmp, path)


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
    if (instance_dir / state.TERMINATE).exists():  # terminated while its launch was pending
        Supervisor(instance_dir, spec).finish("terminated", None)
        return 0
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
