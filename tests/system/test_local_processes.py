"""Local market with real processes: launch, exit, interruptions, terminate, restart."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from providers.base import (
    TAG_OWNER,
    EndReason,
    FailureKind,
    FatalError,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Offering,
    ResourceRef,
)
from providers.local import LocalMarket, LocalSettings, state
from providers.local.market import suggest_trace_start

pytestmark = pytest.mark.timeout(30)

GRACE = 0.3
KILL_AFTER = 0.4
POOL = "aws/us-east-1c/p3.2xlarge/spot"

# A job that records the notice and SIGTERM with timestamps (into $OUT) and then exits 0,
# or with IGNORE=1 keeps running after SIGTERM until SIGKILLed.
TRAP_JOB = r"""
import json, os, signal, sys, time
out, notice = os.environ["OUT"], os.environ["SPOTWISE_NOTICE_FILE"]
def rec(what):
    with open(out, "a") as f:
        f.write(json.dumps([what, time.time()]) + "\n")
def on_term(*_):
    rec("term")
    if os.environ.get("IGNORE") != "1":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
rec("start")
seen = False
while True:
    if not seen and os.path.exists(notice):
        seen = True
        rec("notice:" + json.load(open(notice))["action"])
    time.sleep(0.02)
"""


class FakeClock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t


def wait_for(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def describe(m: LocalMarket, instance_id: str) -> Instance:
    (inst,) = m.describe([ResourceRef(instance_id)])
    return inst


def wait_ended(m: LocalMarket, instance_id: str, timeout: float = 30.0) -> Instance:
    wait_for(lambda: describe(m, instance_id).state == InstanceState.ENDED, timeout)
    return describe(m, instance_id)


def launch(m: LocalMarket, req: LaunchRequest) -> Instance:
    (inst,) = m.launch(req)
    return inst


def refs(*ids: str) -> list[ResourceRef]:
    return [ResourceRef(i) for i in ids]


def events(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    return {k: t for k, t in map(json.loads, path.read_text().splitlines())}


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "state"
    yield d
    kill_everything(d)


def kill_everything(d: Path) -> None:
    """Leave no process behind, whatever the test did: kill what our supervisors started."""
    for inst in (d / "instances").glob("local-*"):
        with contextlib.suppress(Exception):
            if not (inst / "end.json").exists():
                os.kill(json.loads((inst / "supervisor.json").read_text())["pid"], signal.SIGKILL)
        with contextlib.suppress(Exception):
            job = json.loads((inst / "job.json").read_text())["pid"]
            state.kill_job(inst, job)


def make_market(state_dir: Path, clock: object = None, **kw: object) -> LocalMarket:
    # By default the spot pool has capacity for the next hour of market time (1x speed),
    # so only the tests that want an interruption get one.
    kw.setdefault("speedup", 1.0)
    kw.setdefault("trace_start", suggest_trace_start(POOL, timedelta(hours=1)))
    settings = LocalSettings(state_dir=state_dir, grace_period=GRACE, kill_after=KILL_AFTER, **kw)
    return LocalMarket(settings, clock=clock)  # type: ignore[arg-type]


def offering(m: LocalMarket, pool: str = POOL) -> Offering:
    return next(o for o in m.offerings() if o.pool == pool)


def request(
    m: LocalMarket,
    command: list[str],
    token: str = "tok-1",
    env: dict[str, str] | None = None,
    pool: str = "aws/us-east-1c/p3.2xlarge/on-demand",
) -> LaunchRequest:
    return LaunchRequest(
        token=token,
        offering=offering(m, pool),
        command=command,
        env=env or {},
        tags={TAG_OWNER: "tester", "spotwise-job": "j1"},
    )


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_launch_runs_command_with_contract_env(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    out = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    inst = launch(m, request(m, py(code), env={"SPOTWISE_JOB_ID": "j1", "SPOTWISE_ATTEMPT": "2"}))
    assert inst.id.startswith("local-") and inst.cloud == "aws"
    assert inst.state in (InstanceState.RUNNING, InstanceState.ENDED)
    assert inst.tags[TAG_OWNER] == "tester" and inst.launched_at is not None
    ended = wait_ended(m, inst.id)
    assert (ended.end_reason, ended.exit_code) == (EndReason.EXITED, 0)
    env = json.loads(out.read_text())
    assert env["SPOTWISE_CLOUD"] == "local"
    assert env["SPOTWISE_JOB_ID"] == "j1" and env["SPOTWISE_ATTEMPT"] == "2"
    assert env["SPOTWISE_NOTICE_FILE"] == str(m.instance_dir(inst.id) / "notice.json")
    assert "PATH" in env
    assert Path(os.getcwd()) != m.instance_dir(inst.id)  # cwd is per instance, not ours
    assert (m.instance_dir(inst.id) / "stdout.log").exists()


def test_launch_is_idempotent_on_token(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    marker = tmp_path / "starts"
    cmd = ["sh", "-c", f"echo x >> {marker}; sleep 30"]
    a = launch(m, request(m, cmd))
    b = launch(m, request(m, cmd))
    c = launch(make_market(state_dir), request(m, cmd))  # a restarted daemon retrying
    assert a.id == b.id == c.id
    (found,) = m.find_by_token("tok-1")
    assert found.id == a.id and found.state == InstanceState.RUNNING
    wait_for(lambda: marker.exists())
    time.sleep(0.3)  # a second (wrong) start would have written by now
    assert marker.read_text() == "x\n"
    other = launch(m, request(m, cmd, token="tok-2"))
    assert other.id != a.id
    m.terminate(refs(a.id, other.id))
    assert wait_ended(m, a.id).end_reason == EndReason.TERMINATED


def test_job_exit_code_and_missing_executable(state_dir: Path) -> None:
    m = make_market(state_dir)
    a = launch(m, request(m, ["sh", "-c", "echo hi; exit 3"], token="a"))
    b = launch(m, request(m, ["/nonexistent/prog"], token="b"))
    ea, eb = wait_ended(m, a.id), wait_ended(m, b.id)
    assert (ea.end_reason, ea.exit_code) == (EndReason.EXITED, 3)
    assert ea.ended_at is not None and ea.ended_at >= ea.launched_at  # type: ignore[operator]
    assert (m.instance_dir(a.id) / "stdout.log").read_text() == "hi\n"
    assert (eb.end_reason, eb.exit_code) == (EndReason.EXITED, 127)
    assert "cannot start" in (m.instance_dir(b.id) / "stderr.log").read_text()
    assert m.list_tagged("tester") == []  # ended instances are not live


def test_forced_interrupt_notice_then_sigterm(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    out = tmp_path / "events"
    inst = launch(m, request(m, py(TRAP_JOB), env={"OUT": str(out)}, pool=POOL))
    wait_for(lambda: "start" in events(out))
    assert m.interrupt(inst.id)
    ended = wait_ended(m, inst.id)
    ev = events(out)
    assert ended.end_reason == EndReason.INTERRUPTED and ended.exit_code == 0
    assert ended.notice_at is not None
    assert "notice:terminate" in ev and "term" in ev
    gap = ev["term"] - ev["notice:terminate"]
    assert GRACE - 0.1 <= gap <= GRACE + 1.0  # SIGTERM comes a grace period after the notice
    notice = json.loads((m.instance_dir(inst.id) / "notice.json").read_text())
    when = datetime.fromisoformat(notice["time"]) - datetime.fromisoformat(notice["noticed_at"])
    assert notice["action"] == "terminate" and when == timedelta(seconds=GRACE)
    assert not m.interrupt(inst.id)  # already ended


def test_job_ignoring_sigterm_is_killed(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    out = tmp_path / "events"
    env = {"OUT": str(out), "IGNORE": "1"}
    inst = launch(m, request(m, py(TRAP_JOB), env=env, pool=POOL))
    wait_for(lambda: "start" in events(out))
    m.interrupt(inst.id)
    wait_for(lambda: "term" in events(out))
    t_term = events(out)["term"]
    ended = wait_ended(m, inst.id)
    assert ended.end_reason == EndReason.INTERRUPTED
    assert ended.exit_code == 128 + signal.SIGKILL
    assert ended.ended_at is not None
    assert ended.ended_at.timestamp() - t_term >= KILL_AFTER - 0.1


def test_trace_driven_interruption_on_real_time(state_dir: Path, tmp_path: Path) -> None:
    # Start two trace ticks (2 x 195 s market time) before a real outage of the pool, at
    # 260x: the trace takes the capacity away 1.5 s (real) after the market's epoch.
    start = suggest_trace_start(POOL, timedelta(seconds=390))
    m = make_market(state_dir, speedup=260.0, trace_start=start)
    when = m.next_unavailability(POOL)
    assert when is not None and when - m.time.epoch == timedelta(seconds=1.5)
    out = tmp_path / "events"
    inst = launch(m, request(m, py(TRAP_JOB), env={"OUT": str(out)}, pool=POOL))
    od = launch(
        m, request(m, ["sleep", "30"], token="od", pool="aws/us-east-1c/p3.2xlarge/on-demand")
    )
    # Only the supervisor watches the trace here: wait on the job's own record, not describe().
    wait_for(lambda: "term" in events(out), timeout=30)
    assert events(out)["notice:terminate"] >= when.timestamp() - 0.05
    ended = wait_ended(m, inst.id)
    assert ended.end_reason == EndReason.INTERRUPTED
    assert POOL not in {o.pool for o in m.offerings()}
    assert describe(m, od.id).state == InstanceState.RUNNING  # on-demand is never interrupted
    m.terminate(refs(od.id))
    assert wait_ended(m, od.id).end_reason == EndReason.TERMINATED


def test_trace_driven_interruption_on_simulated_clock(state_dir: Path) -> None:
    clock = FakeClock()
    m = make_market(state_dir, clock=clock, speedup=60.0)
    inst = launch(m, request(m, ["sleep", "30"], pool=POOL))
    when = m.next_unavailability(POOL)
    assert when is not None
    clock.t = when - timedelta(seconds=1)
    assert m.poll() == [] and describe(m, inst.id).notice_at is None
    clock.t = when
    assert m.poll() == [inst.id]
    wait_for(lambda: describe(m, inst.id).notice_at is not None)
    assert describe(m, inst.id).state == InstanceState.RUNNING  # inside the grace period
    assert wait_ended(m, inst.id).end_reason == EndReason.INTERRUPTED


def test_restarted_market_readopts_running_processes(state_dir: Path) -> None:
    clock = FakeClock()
    first = make_market(state_dir, clock=clock)
    inst = launch(first, request(first, ["sleep", "30"]))
    del first
    second = make_market(state_dir, clock=clock)  # the daemon restarted
    live = second.list_tagged("tester")
    assert [t.ref.id for t in live] == [inst.id] and live[0].live
    assert describe(second, inst.id).state == InstanceState.RUNNING
    assert second.list_tagged("someone-else") == []
    assert [i.id for i in second.find_by_token("tok-1")] == [inst.id]
    second.terminate(refs(inst.id))
    second.terminate(refs(inst.id))  # repeating is fine
    ended = wait_ended(second, inst.id)
    assert ended.end_reason == EndReason.TERMINATED and ended.notice_at is None
    assert ended.exit_code == 128 + signal.SIGTERM
    second.terminate(
        refs(inst.id, "local-0000000000000000", "i-unknown")
    )  # ended/unknown: no error


def test_terminate_sends_sigterm_without_notice(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    out = tmp_path / "events"
    inst = launch(m, request(m, py(TRAP_JOB), env={"OUT": str(out)}, pool=POOL))
    wait_for(lambda: "start" in events(out))
    m.terminate(refs(inst.id))
    ended = wait_ended(m, inst.id)
    assert ended.end_reason == EndReason.TERMINATED and ended.exit_code == 0
    assert "term" in events(out) and "notice:terminate" not in events(out)


def test_unknown_and_orphaned_instances(state_dir: Path) -> None:
    m = make_market(state_dir)
    unknown = describe(m, "local-ffffffffffffffff")
    assert unknown.id == "local-ffffffffffffffff" and unknown.state == InstanceState.NOT_FOUND
    assert describe(m, "i-not-ours").state == InstanceState.NOT_FOUND
    inst = launch(m, request(m, ["sleep", "30"]))
    sup = json.loads((m.instance_dir(inst.id) / "supervisor.json").read_text())["pid"]
    os.kill(sup, signal.SIGKILL)  # the supervisor dies without recording an end
    ended = wait_ended(m, inst.id)
    assert ended.end_reason == EndReason.UNKNOWN and ended.market == Market.ON_DEMAND


def test_launch_retry_finishes_a_launch_that_crashed(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = make_market(state_dir)
    real_start = LocalMarket._start_supervisor

    def crash(self: LocalMarket, d: Path) -> None:
        raise RuntimeError("daemon died here")

    monkeypatch.setattr(LocalMarket, "_start_supervisor", crash)
    with pytest.raises(RuntimeError):
        m.launch(request(m, ["sleep", "30"]))
    # Retried before anyone looked: the retry finishes the launch.
    monkeypatch.setattr(LocalMarket, "_start_supervisor", real_start)
    again = launch(make_market(state_dir), request(m, ["sleep", "30"]))
    assert again.state == InstanceState.RUNNING and again.launched_at is not None
    job = json.loads((m.instance_dir(again.id) / "job.json").read_text())
    assert again.launched_at == datetime.fromisoformat(job["started_at"])  # billing starts here
    m.terminate(refs(again.id))
    assert wait_ended(m, again.id).end_reason == EndReason.TERMINATED


def test_a_crashed_launch_that_was_looked_at_is_a_launch_failure(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = make_market(state_dir)
    real_start = LocalMarket._start_supervisor

    def crash(self: LocalMarket, d: Path) -> None:
        raise RuntimeError("daemon died here")

    monkeypatch.setattr(LocalMarket, "_start_supervisor", crash)
    with pytest.raises(RuntimeError):
        m.launch(request(m, ["sleep", "30"]))
    (seen,) = m.find_by_token("tok-1")  # the launcher is gone: nothing can complete it
    assert (seen.state, seen.end_reason) == (InstanceState.ENDED, EndReason.LAUNCH_FAILED)
    assert seen.failure is not None and seen.failure.kind is FailureKind.FATAL
    assert seen.launched_at is None  # never ran: never billed
    monkeypatch.setattr(LocalMarket, "_start_supervisor", real_start)
    again = launch(make_market(state_dir), request(m, ["sleep", "30"]))
    assert again.id == seen.id and again.end_reason == EndReason.LAUNCH_FAILED
    assert not (m.instance_dir(seen.id) / "job.json").exists()
    assert m.list_tagged("tester") == []


def test_prune_removes_only_long_ended_instances(state_dir: Path) -> None:
    m = make_market(state_dir)
    done = launch(m, request(m, ["true"], token="done"))
    live = launch(m, request(m, ["sleep", "30"], token="live"))
    wait_ended(m, done.id)
    assert m.prune(timedelta(hours=1)) == 0
    assert m.prune(timedelta(0)) == 1
    assert not m.instance_dir(done.id).exists() and m.instance_dir(live.id).exists()
    assert describe(m, done.id).state == InstanceState.NOT_FOUND
    assert describe(m, live.id).state == InstanceState.RUNNING
    assert m.prune(timedelta(0)) == 0  # repeating is fine
    m.terminate(refs(live.id))
    wait_ended(m, live.id)


def test_unusable_state_dir_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(FatalError, match=r"state_dir .* is not usable"):
        LocalMarket(LocalSettings(state_dir=blocker / "sub"))


class ScaledClock:
    """Like scheduler.core.clock.ScaledClock: real time sped up around an anchor."""

    def __init__(self, anchor: datetime, speedup: float) -> None:
        self.anchor, self.speedup = anchor, speedup

    def now(self) -> datetime:
        return self.anchor + (datetime.now(UTC) - self.anchor) * self.speedup


def test_times_are_reported_on_a_scaled_clock(state_dir: Path) -> None:
    real = make_market(state_dir, speedup=120.0)
    clock = ScaledClock(real.time.epoch, 120.0)
    m = make_market(state_dir, clock=clock, speedup=120.0)
    assert abs((m.market_time() - real.market_time()).total_seconds()) < 5  # one timeline
    real_when, when = real.next_unavailability(POOL), m.next_unavailability(POOL)
    assert real_when is not None and when is not None
    assert when == clock.anchor + (real_when - clock.anchor) * 120
    inst = launch(m, request(m, ["sleep", "0.5"]))
    ended = wait_ended(m, inst.id)
    assert ended.launched_at is not None and ended.ended_at is not None
    took = (ended.ended_at - ended.launched_at).total_seconds()
    assert 0.5 * 120 <= took <= 3 * 120  # half a real second is a market minute
    assert abs((clock.now() - ended.ended_at).total_seconds()) < 3 * 120
