"""The CLI against an API server prints what it prints against the database: each command
run both ways, as a person runs it (a new process, 80 columns), and the outputs compared.
And `spotwise login` keeps the server and token in a file only its owner may read."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, col, select

from scheduler.core.read_settings import ReadSettings
from scheduler.state.files import load_config
from scheduler.state.lease import DaemonRecord
from scheduler.state.models import Event, Job
from scheduler.state.read_models import local_instance_dir
from tests.support.api_server import running_server, token_for
from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("remote")
    world = make_ops_world(tmp)
    logs = local_instance_dir(
        ReadSettings.of_config(load_config(world.config)), "local-running-0001"
    )
    logs.mkdir(parents=True)
    (logs / "stdout.log").write_text("step 1\nstep 2\n")
    (logs / "stderr.log").write_text("warming up\n")
    # An admin who is also in both teams: it sees env values as root does locally.
    admin = token_for(world.engine, "ops", "admin", ("research", "vision"))
    with running_server(world.config, tmp) as server:
        yield world, server, admin


def _both(world, server, token: str, *args: str):
    DaemonRecord(world.engine, timedelta(minutes=1)).beat("ok")
    local = spotwise(*args, "-c", str(world.config))
    remote = spotwise(*args, SPOTWISE_API=server.url, SPOTWISE_TOKEN=token)
    return local, remote


SINCE = (datetime.now(UTC) - timedelta(days=2)).strftime("%Y-%m-%dT%H:00:00+00:00")


@pytest.mark.parametrize(
    "args",
    [
        ("status", "-o", "json"),
        ("status", "--all"),
        ("status", "--state", "failed,held", "-o", "wide"),
        ("show", "crashes", "-o", "json"),
        ("show", "crashes"),
        ("events", "-o", "json"),
        ("events", "--job", "train-v100"),
        ("budget", "-o", "json"),
        ("prices", "--gpu", "T4", "-o", "json"),
        ("prices", "--gpu", "V100"),
        ("logs", "train-v100"),
        ("logs", "train-v100", "--stream", "stderr"),
        ("cost", "--by", "team", "--since", SINCE, "-o", "json"),
        ("report", "--by", "job", "--since", SINCE),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_command_prints_the_same_either_way(both, args) -> None:
    world, server, admin = both
    local, remote = _both(world, server, admin, *args)
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    if args[0] == "prices" and "json" in args:  # each asks the market now: seen_at differs
        docs = [json.loads(x.stdout) for x in (local, remote)]
        for doc in docs:
            for row in doc["offerings"]:
                row.pop("seen_at")
        assert docs[0] == docs[1]
        return
    assert remote.stdout == local.stdout
    assert remote.stdout.strip() or remote.stderr.strip()


def test_mistakes_read_the_same_either_way(both) -> None:
    world, server, admin = both
    for args in (("show", "no-such-job"), ("release", "train-v100"), ("status", "--state", "x")):
        local, remote = _both(world, server, admin, *args)
        assert (
            (local.returncode, local.stderr)
            == (remote.returncode, remote.stderr)
            == (2, local.stderr)
        )
        assert local.stderr.startswith("error: ")


def test_submit_cancel_and_requeue_through_the_server(both, tmp_path: Path) -> None:
    world, server, _admin = both
    token = token_for(world.engine, "carol", "member", ("vision",))
    job = tmp_path / "job.toml"
    job.write_text('name = "remote-job"\nteam = "vision"\ncommand = ["true"]\ngpus = "T4:1"\n')
    remote = {"SPOTWISE_API": server.url, "SPOTWISE_TOKEN": token}
    r = spotwise("submit", str(job), "-o", "json", **remote)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["id"]
    with Session(world.engine) as s:
        row = s.get(Job, job_id)
        assert row is not None and row.submitted_by == "carol"
    r = spotwise("cancel", "remote-job", **remote)
    assert r.returncode == 0 and r.stdout == f"cancel requested for {job_id}\n"
    r = spotwise("submit", str(tmp_path / "missing.toml"), **remote)
    assert r.returncode == 2 and "missing.toml: no such job file" in r.stderr
    job.write_text('name = "x"\nteam = "research"\ncommand = ["true"]\n')
    r = spotwise("submit", str(job), **remote)
    assert r.returncode == 2 and "'research' is not one of carol's teams" in r.stderr
    # release and requeue: refused to carol (another team's jobs), done for research's member.
    held, failed = world.ids["held"], world.ids["failed"]
    r = spotwise("release", held, **remote)
    assert r.returncode == 2 and r.stderr.startswith(f"error: no job {held!r}")
    research = {
        **remote,
        "SPOTWISE_TOKEN": token_for(world.engine, "rita", "member", ("research",)),
    }
    r = spotwise("release", held, **research)
    assert r.returncode == 0 and r.stdout == f"{held} released: PENDING\n", r.stderr
    r = spotwise("requeue", "crashes", **research)
    assert r.returncode == 0 and r.stdout == f"{failed} requeued: PENDING\n", r.stderr
    with Session(world.engine) as s:
        said = {
            (e.job_id, e.kind): e.actor
            for e in s.exec(select(Event).where(col(Event.kind).in_(("released", "requeued"))))
        }
    assert said == {(held, "released"): "rita", (failed, "requeued"): "rita"}


def test_login_keeps_the_token_for_its_owner_only(both, tmp_path: Path) -> None:
    world, server, admin = both
    home = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    bad = spotwise("login", server.url, "--token-stdin", stdin="swt_nope\n", **home)
    assert bad.returncode == 2 and bad.stderr == "error: invalid token\n"
    assert not (tmp_path / "cfg" / "spotwise" / "login.json").exists()
    r = spotwise("login", server.url, "--token-stdin", stdin=admin + "\n", **home)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"logged in to {server.url} as ops (admin")
    saved = tmp_path / "cfg" / "spotwise" / "login.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert admin not in r.stdout + r.stderr
    DaemonRecord(world.engine, timedelta(minutes=1)).beat("ok")
    status = spotwise("status", "-o", "json", **home)
    assert status.returncode == 0 and len(json.loads(status.stdout)["jobs"]) >= 5
    os.chmod(saved, 0o644)
    refused = spotwise("status", **home)
    assert refused.returncode == 2 and "chmod 600" in refused.stderr
    os.chmod(saved, 0o600)
    assert spotwise("logout", **home).returncode == 0 and not saved.exists()
    gone = spotwise("status", SPOTWISE_API=server.url, SPOTWISE_TOKEN="swt_0000000000_" + "x" * 43)
    assert gone.returncode == 2 and gone.stderr == "error: invalid token\n"
