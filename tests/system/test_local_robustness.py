"""Local market under failure: dead supervisors, crashed launches, damaged state, history.

Real processes, each test bounded; every job a test starts is killed by the state_dir fixture.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from providers.base import (
    TAG_NODE,
    EndReason,
    FailureKind,
    InstanceState,
    ResourceRef,
)
from providers.local import state
from tests.system.test_local_processes import (
    GRACE,
    KILL_AFTER,
    POOL,
    describe,
    kill_everything,
    launch,
    make_market,
    request,
    wait_ended,
    wait_for,
)
from trainer import contract

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and prctl"),
]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "state"
    yield d
    kill_everything(d)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (nobody may have reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return st not in ("Z", "X")


def pid_in(path: Path) -> int:
    return int(json.loads(path.read_text())["pid"])


def job_with_child(tmp_path: Path, escape: bool = False) -> tuple[list[str], Path]:
    """bash that starts `sleep 300` and waits; with `escape` the child leaves the job's
    process group and session (setsid), so only the environment marker still finds it."""
    child = tmp_path / "child.pid"
    spawn = "setsid sleep 300" if escape else "sleep 300"
    return ["bash", "-c", f"{spawn} & echo $! > '{child}'; wait"], child


def started_child(child: Path) -> int:
    wait_for(lambda: child.exists() and child.read_text().strip().isdigit())
    return int(child.read_text())


def test_a_killed_supervisor_takes_its_whole_job_along(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    cmd, child_file = job_with_child(tmp_path)
    inst = launch(m, request(m, cmd))
    child = started_child(child_file)
    d = m.instance_dir(inst.id)
    leader = pid_in(d / "job.json")
    assert alive(leader) and alive(child)
    os.kill(pid_in(d / "supervisor.json"), signal.SIGKILL)
    wait_for(lambda: not alive(leader), timeout=20)  # PR_SET_PDEATHSIG
    ended = wait_ended(m, inst.id, timeout=20)  # describe sweeps the rest of the group
    assert (ended.state, ended.end_reason) == (InstanceState.ENDED, EndReason.UNKNOWN)
    assert not alive(child)
    assert m.list_tagged("tester") == []
    again = launch(m, request(m, cmd))  # a retry never starts a second job beside it
    assert again.id == inst.id and again.state is InstanceState.ENDED
    assert any(inst.id in e.message for e in m.drain_events())


def test_an_orphan_is_swept_in_its_own_market_only(tmp_path: Path) -> None:
    """Two markets on one host launch the same token, so their instances share an id (two
    daemons, or two test workers): sweeping one market's orphan must not kill the job of the
    other, as matching on the id alone did."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        a, b = make_market(mine), make_market(theirs)
        cmd_a, child_a = job_with_child(tmp_path / "a", escape=True)
        cmd_b, child_b = job_with_child(tmp_path / "b", escape=True)
        ia, ib = launch(a, request(a, cmd_a)), launch(b, request(b, cmd_b))
        assert ia.id == ib.id
        orphan, other = started_child(child_a), started_child(child_b)
        d = a.instance_dir(ia.id)
        os.kill(pid_in(d / "supervisor.json"), signal.SIGKILL)
        wait_for(lambda: not alive(pid_in(d / "job.json")), timeout=20)
        a.terminate([ia.id])  # the orphan is swept: its escaped child killed
        assert not alive(orphan)
        assert alive(other) and alive(pid_in(b.instance_dir(ib.id) / "job.json"))
        assert describe(b, ib.id).state is InstanceState.RUNNING
    finally:
        kill_everything(mine)
        kill_everything(theirs)


def test_terminate_of_an_orphan_kills_it(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    cmd, child_file = job_with_child(tmp_path, escape=True)
    inst = launch(m, request(m, cmd))
    child = started_child(child_file)
    d = m.instance_dir(inst.id)
    os.kill(pid_in(d / "supervisor.json"), signal.SIGKILL)
    wait_for(lambda: not alive(pid_in(d / "job.json")), timeout=20)
    assert alive(child)  # its own session: out of reach of the group and PDEATHSIG
    m.terminate([inst.ref])
    assert not alive(child)
    assert describe(m, inst.id).end_reason is EndReason.UNKNOWN
    m.terminate([inst.ref])  # repeating is fine


LAUNCHER = r"""
import os, signal, sys, time
from providers.base import TAG_OWNER, LaunchRequest
from providers.local import LocalMarket, LocalSettings
from providers.local.market import LocalMarket as M

def crash(self, d):
    if sys.argv[2] == "hang":
        open(sys.argv[3], "w").close()
        time.sleep(60)  # the test kills us here
    os.kill(os.getpid(), signal.SIGKILL)

M._start_supervisor = crash
m = LocalMarket(LocalSettings(state_dir=sys.argv[1], speedup=1.0))
o = next(o for o in m.offerings() if o.pool == "aws/us-east-1c/p3.2xlarge/on-demand")
m.launch(LaunchRequest(token="tok-1", offering=o, command=["sleep", "30"], env={},
                       tags={TAG_OWNER: "tester"}))
"""


def launcher(state_dir: Path, mode: str, flag: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-c", LAUNCHER, str(state_dir), mode, str(flag)]
    return subprocess.Popen(args, env=env)


def test_a_launch_killed_midway_is_pending_only_while_its_launcher_lives(
    state_dir: Path, tmp_path: Path
) -> None:
    m = make_market(state_dir)
    flag = tmp_path / "in-launch"
    proc = launcher(state_dir, "hang", flag)
    try:
        wait_for(flag.exists, timeout=20)
        (seen,) = m.find_by_token("tok-1")
        assert seen.state is InstanceState.PENDING and seen.launched_at is None
        (tagged,) = m.list_tagged("tester")  # leak collection sees the launch in flight
        assert tagged.live and tagged.created_at is not None
    finally:
        proc.kill()
        proc.wait(timeout=10)
    (seen,) = m.find_by_token("tok-1")
    assert (seen.state, seen.end_reason) == (InstanceState.ENDED, EndReason.LAUNCH_FAILED)
    assert seen.failure is not None and seen.failure.kind is FailureKind.FATAL
    assert seen.launched_at is None
    again = launch(m, request(m, ["sleep", "30"]))
    assert again.id == seen.id and again.state is InstanceState.ENDED
    assert not (m.instance_dir(seen.id) / "job.json").exists()
    assert m.list_tagged("tester") == []


def test_a_launch_killed_midway_is_finished_by_the_retry(state_dir: Path, tmp_path: Path) -> None:
    proc = launcher(state_dir, "die", tmp_path / "unused")
    assert proc.wait(timeout=20) == -signal.SIGKILL
    m = make_market(state_dir)
    before = datetime.now(UTC)
    inst = launch(m, request(m, ["sleep", "30"]))  # the restarted daemon retries first
    assert inst.state is InstanceState.RUNNING
    assert inst.launched_at is not None and inst.launched_at >= before  # job start, not spec
    m.terminate([inst.ref])
    assert wait_ended(m, inst.id).end_reason is EndReason.TERMINATED


def test_the_exit_code_reaches_the_checkpoint_store(state_dir: Path, tmp_path: Path) -> None:
    m = make_market(state_dir)
    store = tmp_path / "ck store"
    uri = contract.to_uri(store)
    assert "%20" in uri
    env = {contract.ENV_CHECKPOINT_URI: uri, contract.ENV_ATTEMPT: "3"}
    a = launch(m, request(m, ["sh", "-c", "exit 7"], token="a", env=env))
    s3 = {contract.ENV_CHECKPOINT_URI: "s3://bucket/jobs/j1", contract.ENV_ATTEMPT: "4"}
    b = launch(m, request(m, ["true"], token="b", env=s3))
    term = {**env, contract.ENV_ATTEMPT: "5"}
    c = launch(m, request(m, ["sleep", "30"], token="c", env=term))
    m.terminate([c.ref])
    assert wait_ended(m, a.id).exit_code == 7
    assert wait_ended(m, b.id).exit_code == 0  # s3: the trainer's business, skipped
    assert wait_ended(m, c.id).exit_code == 128 + signal.SIGTERM
    doc = json.loads((store / contract.exit_name(3)).read_text())
    assert (doc["attempt"], doc["exit_code"]) == (3, 7)
    assert json.loads((store / contract.exit_name(5)).read_text())["exit_code"] == 143
    assert sorted(p.name for p in (store / "exits").iterdir()) == ["3.json", "5.json"]
    assert not (tmp_path / "ck%20store").exists()


def test_a_gang_is_one_token_family(state_dir: Path) -> None:
    m = make_market(state_dir)
    req = replace(request(m, ["sleep", "30"], token="gang"), count=3, placement_group="pg-1")
    nodes = m.launch(req)
    ids = [n.id for n in nodes]
    assert len(set(ids)) == 3 and [n.node for n in nodes] == [0, 1, 2]
    assert [n.tags[TAG_NODE] for n in nodes] == ["0", "1", "2"]
    assert all(n.state is InstanceState.RUNNING for n in nodes)
    assert [n.id for n in m.launch(req)] == ids  # idempotent as a family
    assert [n.id for n in m.find_by_token("gang")] == ids
    assert [n.node for n in make_market(state_dir).describe([n.ref for n in nodes])] == [0, 1, 2]
    m.terminate([n.ref for n in nodes])
    for i in ids:
        assert wait_ended(m, i).end_reason is EndReason.TERMINATED


def test_a_damaged_instance_directory_never_fails_the_others(state_dir: Path) -> None:
    m = make_market(state_dir)
    good = launch(m, request(m, ["sleep", "30"], token="good"))
    bad = launch(m, request(m, ["sleep", "30"], token="bad"))
    done = launch(m, request(m, ["true"], token="done"))
    wait_for(lambda: (m.instance_dir(done.id) / "end.json").exists())
    bd = m.instance_dir(bad.id)
    (bd / "spec.json").write_text("{not json")
    (bd / "job.json").write_text("[1]")
    (m.instance_dir(done.id) / "end.json").write_text("\0\0")
    junk = state_dir / "instances" / "local-0123456789abcdef"
    junk.mkdir()
    (junk / "spec.json").write_text("garbage")
    (state_dir / "live" / junk.name).touch()
    fresh = make_market(state_dir)  # nothing cached
    refs = [good.ref, bad.ref, done.ref, ResourceRef(junk.name)]
    seen = fresh.describe(refs)
    assert [i.id for i in seen] == [r.id for r in refs]
    assert seen[0].state is InstanceState.RUNNING
    assert seen[1].state is InstanceState.RUNNING  # its supervisor lives: never call it gone
    assert (seen[2].state, seen[2].end_reason) == (InstanceState.ENDED, EndReason.UNKNOWN)
    assert (seen[3].state, seen[3].end_reason) == (InstanceState.ENDED, EndReason.LAUNCH_FAILED)
    assert [t.ref.id for t in fresh.list_tagged("tester")] == [good.id]
    assert any(bad.id in e.message for e in fresh.drain_events())
    fresh.terminate(refs)
    assert wait_ended(fresh, good.id).end_reason is EndReason.TERMINATED
    assert wait_ended(fresh, bad.id).state is InstanceState.ENDED


def test_an_unwritable_notice_still_interrupts(state_dir: Path) -> None:
    m = make_market(state_dir)
    inst = launch(m, request(m, ["sleep", "30"], pool=POOL))
    (m.instance_dir(inst.id) / "notice.json").mkdir()  # the notice write fails (as on ENOSPC)
    (m.instance_dir(inst.id) / "notice.json" / "x").touch()
    assert m.interrupt(inst.ref)
    ended = wait_ended(m, inst.id, timeout=GRACE + KILL_AFTER + 5)
    assert ended.end_reason is EndReason.INTERRUPTED


def test_ended_history_stays_out_of_the_hot_path(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = make_market(state_dir)
    live = launch(m, request(m, ["sleep", "30"], token="live"))
    spec = json.loads((m.instance_dir(live.id) / "spec.json").read_text())
    ended_at = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    end = json.dumps({"reason": "exited", "exit_code": 0, "ended_at": ended_at})
    n = 300  # the point is what is read, not how long it takes here
    for i in range(n):  # as an older version left them: no markers, no index
        d = state_dir / "instances" / f"local-{i:016x}"
        d.mkdir()
        (d / "spec.json").write_text(json.dumps({**spec, "id": d.name}))
        (d / "end.json").write_text(end)
    for p in (state_dir / "live").iterdir():
        p.unlink()
    (state_dir / "live").rmdir()
    upgraded = make_market(state_dir)  # rebuilds the markers and the ended index once
    assert os.listdir(state_dir / "live") == [live.id]
    reads: list[Path] = []
    real_read = state.read_json

    def counting_read(path: Path) -> dict[str, object] | None:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(state, "read_json", counting_read)
    assert [t.ref.id for t in upgraded.list_tagged("tester")] == [live.id]
    assert upgraded.prune(timedelta(days=3)) == 0
    assert {p.parent.name for p in reads} == {live.id}  # not one file of the history read
    old = describe(upgraded, f"local-{7:016x}")  # the history still answers describe
    assert (old.state, old.exit_code) == (InstanceState.ENDED, 0)
    assert upgraded.prune(timedelta(days=1)) == n
    assert describe(upgraded, f"local-{7:016x}").state is InstanceState.NOT_FOUND
    assert describe(upgraded, live.id).state is InstanceState.RUNNING
    assert state.read_lines(state_dir / state.ENDED_INDEX) == []
    upgraded.terminate([live.ref])
    wait_ended(upgraded, live.id)
