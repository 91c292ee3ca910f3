"""The store contract on the trainer side: URIs, the owner fence, exit records, early SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.trainer_runs import REPO, env, progress, run_trainer, tiny_args
from trainer import EXIT_FENCED, EXIT_PREEMPTED, contract
from trainer.checkpoint import parse_latest
from trainer.launch import launch
from trainer.storage import LocalStore, open_store


def test_every_uri_goes_through_contract_parse_uri(tmp_path: Path) -> None:
    spaced = tmp_path / "my store" / "job 1"
    uri = contract.to_uri(spaced)
    assert "%20" in uri
    store = open_store(uri)
    assert isinstance(store, LocalStore) and store.root == spaced  # not ".../my%20store"
    store.write_text(contract.exit_name(2), contract.exit_doc(2, 75))  # a nested name
    assert json.loads((spaced / "exits" / "2.json").read_text())["exit_code"] == 75
    assert [p.name for p in (spaced / "exits").iterdir()] == ["2.json"]  # no temp files
    assert open_store(str(spaced)).root == spaced  # a plain path with a space
    with pytest.raises(ValueError, match="unsupported"):
        open_store("ftp://bucket/x")
    with pytest.raises(ValueError, match="no bucket"):
        open_store("s3:///x")


def _owner(ckpt: Path, attempt: int) -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / contract.OWNER).write_text(contract.owner_doc(attempt, f"a{attempt}", "j"))


@pytest.mark.timeout(60)
def test_fenced_at_start_touches_nothing(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    _owner(ckpt, 5)
    out = run_trainer(tiny_args(ckpt), SPOTWISE_ATTEMPT="4")
    assert out.returncode == EXIT_FENCED, out.stderr[-2000:]
    assert out.stderr.count("fenced: ") == 1 and "names attempt 5, this is attempt 4" in out.stderr
    assert sorted(p.name for p in ckpt.iterdir()) == [contract.OWNER]


@pytest.mark.timeout(90)
def test_fenced_mid_run_never_advances_latest(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    _owner(ckpt, 3)
    argv = tiny_args(
        ckpt, checkpoint__interval_steps=2, training__step_delay_seconds=0.15, training__steps=40
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *argv],
        cwd=REPO,
        env=env(SPOTWISE_ATTEMPT="3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (ckpt / "latest").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)  # waiting on a real process
        _owner(ckpt, 4)  # the daemon launched attempt 4 elsewhere
        fenced_at = parse_latest((ckpt / "latest").read_text())
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_FENCED, err[-2000:]
    assert err.count("fenced: ") == 1
    latest = parse_latest((ckpt / "latest").read_text())
    assert latest is not None and fenced_at is not None and latest <= fenced_at + 2  # one in flight
    doc = progress(ckpt)
    assert doc["state"] == "running" and doc["step"] <= latest + 2
    assert not (ckpt / contract.DONE).exists()


def test_launch_signalled_before_spawn_is_preempted_without_running(monkeypatch) -> None:
    started: list[object] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    assert launch(2, ["--steps", "1"], already_signalled=True) == EXIT_PREEMPTED
    assert started == []  # torchrun was never started


def _catches_sigterm(pid: int) -> bool:
    """The process has a SIGTERM handler installed (Linux /proc: SigCgt bit 15)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("delay", [0.0, 2.0])
def test_launcher_sigterm_during_startup_exits_75(tmp_path: Path, delay: float) -> None:
    """SIGTERM while torchrun/the workers are still starting: 75, not torchrun's 1 or -15."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "--nproc-per-node", "2", *tiny_args(tmp_path / "c")],
        cwd=REPO,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(proc.pid):  # the interpreter itself is up
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.005)
        time.sleep(delay)  # 0: before torchrun is even spawned; 2: torchrun/workers starting
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=100)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    assert not (tmp_path / "c" / contract.DONE).exists()


# ------------------------------------------------------------------ exit records
def _outcome(*args: str, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.outcome", *args],
        cwd=REPO,
        env=env(**kw.pop("extra_env", {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


SLEEPER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.timeout(60)
def test_outcome_runs_forwards_and_records_locally(tmp_path: Path) -> None:
    store = tmp_path / "my store"
    uri = contract.to_uri(store)
    p = _outcome("--uri", uri, "--attempt", "3", "--", sys.executable, "-c", "raise SystemExit(9)")
    assert p.wait(timeout=30) == 9
    assert json.loads((store / "exits" / "3.json").read_text())["exit_code"] == 9

    p = _outcome("--uri", uri, "--attempt", "4", "--", sys.executable, "-c", SLEEPER)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)  # forwarded to CMD, whose handler exits 75
    assert p.wait(timeout=30) == EXIT_PREEMPTED
    doc = json.loads((store / "exits" / "4.json").read_text())
    assert doc["attempt"] == 4 and doc["exit_code"] == EXIT_PREEMPTED and doc["at"].endswith("Z")

    p = _outcome("record", "--uri", uri, "--attempt", "5", "--exit-code", "76")
    assert p.wait(timeout=30) == 0
    assert json.loads((store / "exits" / "5.json").read_text())["exit_code"] == 76

    p = _outcome("--uri", "ftp://x/y", "--attempt", "1", "--", "true")
    assert p.wait(timeout=30) == 2
    assert "unsupported checkpoint URI" in p.communicate()[1]
    no_torch = "import sys, trainer.outcome; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", no_torch], cwd=REPO, env=env()).returncode == 0


@pytest.fixture(scope="module")
def moto_s3():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.timeout(60)
def test_outcome_records_into_s3(moto_s3: str) -> None:
    import boto3

    creds = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    s3 = boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket="ckpt")
    extra = dict(creds, SPOTWISE_S3_ENDPOINT_URL=moto_s3)
    uri = "s3://ckpt/jobs/j%201"
    p = _outcome("--uri", uri, "--attempt", "2", "--", sys.executable, "-c", "exit(75)",
                 extra_env=extra)  # fmt: skip
    assert p.wait(timeout=30) == EXIT_PREEMPTED, p.communicate()[1]
    p = _outcome("record", "--uri", uri, "--attempt", "3", "--exit-code", "0", extra_env=extra)
    assert p.wait(timeout=30) == 0, p.communicate()[1]

    def get(key: str) -> dict:
        return json.loads(s3.get_object(Bucket="ckpt", Key=key)["Body"].read())

    assert get("jobs/j 1/exits/2.json")["exit_code"] == EXIT_PREEMPTED
    assert get("jobs/j 1/exits/3.json")["exit_code"] == 0
