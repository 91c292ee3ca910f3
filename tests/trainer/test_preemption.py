"""Notice sources: each cloud's metadata fake, the local notice file, and the real trainer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.metadata_servers import FakeAzureEvents, FakeGcpMetadata, FakeImds
from tests.support.trainer_runs import (
    REPO,
    env,
    progress,
    sigterm_whole_group,
    tiny_args,
    write_notice,
)
from trainer import EXIT_PREEMPTED
from trainer.config import PreemptionConfig
from trainer.preemption import (
    AwsWatcher,
    AzureWatcher,
    FileWatcher,
    GcpWatcher,
    Watcher,
    make_watcher,
)


def _wait(predicate, timeout: float = 20.0) -> None:
    """Wait for a real process/thread to reach a state (not for a simulated event)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


@pytest.mark.timeout(20)
def test_aws_watcher_uses_imdsv2_token_and_404_means_none() -> None:
    with FakeImds() as fake:
        w = AwsWatcher(fake.endpoint, 0.01)
        assert w.check() is None
        fake.preempt()
        notice = w.check()
        assert notice is not None and "terminate" in notice.detail
        methods = [(m, p) for m, p, _ in fake.requests]
        assert methods[0] == ("PUT", "/latest/api/token")
        assert all(h.get("x-aws-ec2-metadata-token") == fake.token for m, _, h in fake.requests[1:])


@pytest.mark.timeout(20)
def test_gcp_watcher_hangs_on_wait_for_change_until_preempted() -> None:
    with FakeGcpMetadata() as fake:
        w = GcpWatcher(fake.endpoint, 0.01, wait_seconds=10)
        w.start()
        _wait(lambda: fake.hanging_gets >= 1)  # parked in a hanging GET, not polling
        assert not w.seen
        fake.preempt()
        assert w._seen.wait(5)
        assert w.notice is not None and w.notice.source == "gcp"
        assert fake.hanging_gets == 1
        w.stop()


@pytest.mark.timeout(20)
def test_azure_watcher_sees_preempt_and_acknowledges() -> None:
    with FakeAzureEvents() as fake:
        w = AzureWatcher(fake.endpoint, 0.01)
        assert w.check() is None
        fake.preempt()
        assert w.check() is not None
        w.acknowledge()
        assert fake.acknowledged == [fake.event_id]


@pytest.mark.timeout(20)
def test_aws_rebalance_recommendation_is_an_early_signal_not_a_notice() -> None:
    with FakeImds() as fake:
        w = AwsWatcher(fake.endpoint, 0.01)
        assert w.check() is None and w.early is None
        fake.recommend_rebalance()
        assert w.check() is None and not w.seen  # keep training ...
        assert w.early is not None and w.early.source == "aws-rebalance"  # ... but save now
        paths = [p for _, p, _ in fake.requests]
        assert "/latest/meta-data/events/recommendations/rebalance" in paths
        fake.preempt()
        assert w.check() is not None


def test_gcp_notice_counts_the_window_the_launch_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTWISE_CLOUD", "gcp")
    monkeypatch.setenv("SPOTWISE_NOTICE_SECONDS", "150")
    w = make_watcher(PreemptionConfig())
    assert isinstance(w, GcpWatcher) and w.window == 150
    with FakeGcpMetadata() as fake:
        w = GcpWatcher(fake.endpoint, 0.01, window=150)
        fake.preempt()
        notice = w.check()
        assert notice is not None and 148 < (notice.seconds_left() or 0) <= 150
    monkeypatch.setenv("SPOTWISE_NOTICE_SECONDS", "junk")
    assert make_watcher(PreemptionConfig()).window == 30  # type: ignore[attr-defined]


@pytest.mark.timeout(30)
def test_azure_first_call_waits_while_scheduled_events_is_enabled() -> None:
    with FakeAzureEvents() as fake:
        fake.first_delay = 2.5  # past the 2 s every later call gets
        w = AzureWatcher(fake.endpoint, 0.01)
        assert w.first_timeout >= 120
        assert w.check() is None  # the slow first answer is an answer, not an error
        fake.preempt()
        assert w.check() is not None


def test_file_watcher_and_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notice = tmp_path / "notice.json"
    w = FileWatcher(notice, 0.01)
    assert w.check() is None
    write_notice(notice, '{"action": "terminate", "time": "2026-11-29T15:00:00Z"}')
    assert w.check() is not None
    for cloud, kind in [("aws", AwsWatcher), ("gcp", GcpWatcher), ("azure", AzureWatcher)]:
        monkeypatch.setenv("SPOTWISE_CLOUD", cloud)
        assert type(make_watcher(PreemptionConfig())) is kind
    monkeypatch.setenv("SPOTWISE_CLOUD", "local")
    monkeypatch.setenv("SPOTWISE_NOTICE_FILE", str(notice))
    assert isinstance(make_watcher(PreemptionConfig()), FileWatcher)
    monkeypatch.setenv("SPOTWISE_AWS_IMDS_ENDPOINT", "http://127.0.0.1:9")
    aws = make_watcher(PreemptionConfig(cloud="aws"))
    assert isinstance(aws, AwsWatcher) and aws.endpoint == "http://127.0.0.1:9"
    monkeypatch.delenv("SPOTWISE_CLOUD")
    assert type(make_watcher(PreemptionConfig())) is Watcher  # SIGTERM only


@pytest.mark.timeout(240)
def test_notice_from_every_source_checkpoints_and_exits_75(tmp_path: Path) -> None:
    """Four real trainer processes, one per notice source, preempted mid-run."""
    with FakeImds() as aws, FakeGcpMetadata() as gcp, FakeAzureEvents() as azure:
        notice_file = tmp_path / "notice.json"
        sources = {
            "aws": ({"SPOTWISE_AWS_IMDS_ENDPOINT": aws.endpoint}, aws.preempt),
            "gcp": ({"SPOTWISE_GCP_METADATA_ENDPOINT": gcp.endpoint}, gcp.preempt),
            "azure": ({"SPOTWISE_AZURE_METADATA_ENDPOINT": azure.endpoint}, azure.preempt),
            "local": (
                {"SPOTWISE_NOTICE_FILE": str(notice_file)},
                lambda: write_notice(
                    notice_file, json.dumps({"action": "terminate", "time": "2026-11-29T15:00:30Z"})
                ),
            ),
        }
        procs = {}
        for cloud, (extra, _) in sources.items():
            ckpt = tmp_path / cloud
            argv = tiny_args(
                ckpt,
                training__steps=100_000,
                checkpoint__interval_steps=0,
                preemption__cloud="",
                preemption__poll_interval_seconds=0.02,
                checkpoint__async_save=cloud == "gcp",
                training__step_delay_seconds=0.05,
            )
            procs[cloud] = subprocess.Popen(
                [sys.executable, "-m", "trainer", *argv],
                cwd=REPO,
                env=env(SPOTWISE_CLOUD=cloud, SPOTWISE_CHECKPOINT_URI="", **extra),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        try:
            for cloud, (_, preempt) in sources.items():
                path = tmp_path / cloud / "progress.json"
                _wait(
                    lambda path=path: path.exists() and json.loads(path.read_text())["step"] >= 2,
                    timeout=120,
                )
                preempt()
            for cloud, proc in procs.items():
                _, err = proc.communicate(timeout=90)
                assert proc.returncode == EXIT_PREEMPTED, f"{cloud}: {err[-2000:]}"
        finally:
            for proc in procs.values():
                proc.kill()
    for cloud in sources:
        ckpt = tmp_path / cloud
        doc = progress(ckpt)
        assert doc["state"] == "preempted" and doc["step"] >= 2
        assert doc["last_checkpoint_step"] == doc["step"]
        assert (ckpt / "latest").read_text().strip() == f"step-{doc['step']}"
        assert (ckpt / f"step-{doc['step']}" / ".metadata").is_file()
        assert not (ckpt / "DONE").exists()
    assert azure.acknowledged == [azure.event_id]  # after the checkpoint, before exit


def test_notices_carry_deadlines() -> None:
    from datetime import UTC, datetime

    from trainer.preemption import DEFAULT_NOTICE_SECONDS, Notice, parse_time

    t = datetime(2026, 11, 29, 15, tzinfo=UTC).timestamp()

    assert parse_time("2026-11-29T15:00:00Z") == t
    assert parse_time("Sun, 29 Nov 2026 15:00:00 GMT") == t  # Azure NotBefore
    assert parse_time("soon") is None and parse_time(None) is None
    n = Notice.at("aws", "terminate", "2026-11-29T15:00:00Z")
    assert n.deadline == t and n.seconds_left(now=t - 10) == 10.0
    n = Notice.at("gcp", "preempted")  # no time given: about 30 s
    assert n.deadline == pytest.approx(n.seen_at + DEFAULT_NOTICE_SECONDS)
    assert Notice("sigterm").seconds_left() is None


def test_file_watcher_reads_the_notice_time(tmp_path: Path) -> None:
    notice = tmp_path / "n.json"
    write_notice(notice, '{"action": "terminate", "time": "2026-11-29T15:00:30+00:00"}')
    from datetime import UTC, datetime

    found = FileWatcher(notice, 0.01).check()
    assert found is not None
    assert found.deadline == datetime(2026, 11, 29, 15, 0, 30, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("left", "save_s", "inflight", "plan", "fits"),
    [
        (None, 5.0, None, "save", True),  # unknown deadline (bare SIGTERM)
        (30.0, None, None, "save", True),  # no save measured yet
        (30.0, 10.0, None, "save", True),
        (30.0, 40.0, None, "save", False),  # nothing better to do: try, and say so
        (30.0, 10.0, 15.0, "save", True),  # in-flight then a fresh save both fit
        (30.0, 20.0, 15.0, "wait-only", False),  # keep the in-flight one, skip a fresh one
        (30.0, 50.0, 45.0, "abandon", False),  # not even the in-flight one fits
    ],
)
def test_final_save_plan_against_the_deadline(left, save_s, inflight, plan, fits) -> None:
    from trainer.checkpoint import final_save_plan

    assert final_save_plan(left, save_s, inflight) == (plan, fits)


@pytest.mark.timeout(120)
def test_a_save_that_cannot_fit_the_notice_is_reported(tmp_path: Path) -> None:
    """The notice's deadline has already passed: the trainer still saves (nothing better to
    do) and says so in the log and in progress.json."""
    ckpt, notice = tmp_path / "c", tmp_path / "notice.json"
    argv = tiny_args(
        ckpt,
        training__steps=100_000,
        checkpoint__interval_steps=2,
        preemption__cloud="local",
        preemption__poll_interval_seconds=0.02,
        training__step_delay_seconds=0.05,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *argv],
        cwd=REPO,
        env=env(SPOTWISE_NOTICE_FILE=str(notice)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: (ckpt / "latest").exists(), timeout=90)  # one save measured
        write_notice(notice, json.dumps({"action": "terminate", "time": "2020-01-01T00:00:00Z"}))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    doc = progress(ckpt)
    assert doc["save_fits_notice"] is False and doc["notice_seconds_left"] < 0
    assert doc["last_save_seconds"] > 0 and doc["last_checkpoint_step"] == doc["step"]
    assert "saving anyway, it may not finish" in err


@pytest.mark.timeout(60)
def test_sigterm_to_the_whole_group_with_loader_workers_checkpoints_and_exits_75(
    tmp_path: Path,
) -> None:
    """A shutdown signals every process of the job (systemd, the cloud, the local supervisor).

    The DataLoader workers get SIGTERM too; one that died of it made the trainer raise
    "DataLoader worker ... killed by signal: Terminated" and exit 1 without a checkpoint.
    """
    ckpt = tmp_path / "ckpt"
    argv = tiny_args(
        ckpt,
        training__steps=100_000,
        checkpoint__interval_steps=0,
        data__num_workers=2,
        training__step_delay_seconds=0.05,
    )
    path = ckpt / "progress.json"
    code, err = sigterm_whole_group(
        [sys.executable, "-m", "trainer", *argv],
        env(),
        lambda _: _wait(
            lambda: path.exists() and json.loads(path.read_text())["step"] >= 2, timeout=45
        ),
    )
    assert code == EXIT_PREEMPTED, err[-2000:]
    doc = progress(ckpt)
    assert doc["state"] == "preempted" and doc["last_checkpoint_step"] == doc["step"] >= 2


@pytest.mark.timeout(120)
def test_rebalance_saves_early_and_the_notice_is_recorded_in_the_store(tmp_path: Path) -> None:
    """A rebalance recommendation: one asynchronous save while training goes on; then the
    notice: progress.json names it before the final save, for the daemon to read."""
    ckpt = tmp_path / "c"
    with FakeImds() as aws:
        argv = tiny_args(
            ckpt,
            training__steps=100_000,
            checkpoint__interval_steps=0,
            checkpoint__async_save=True,
            preemption__cloud="aws",
            preemption__poll_interval_seconds=0.02,
            training__step_delay_seconds=0.05,
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer", *argv],
            cwd=REPO,
            env=env(SPOTWISE_AWS_IMDS_ENDPOINT=aws.endpoint, SPOTWISE_CHECKPOINT_URI=""),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            path = ckpt / "progress.json"
            _wait(lambda: path.exists() and progress(ckpt)["step"] >= 2, timeout=90)
            assert not (ckpt / "latest").exists()  # no save on schedule
            aws.recommend_rebalance()
            # `latest` is written first, progress.json's record of the save after it: wait
            # for both (reading progress.json the moment `latest` appears could miss it).
            _wait(
                lambda: (
                    (ckpt / "latest").exists()
                    and progress(ckpt).get("last_checkpoint_step") is not None
                ),
                timeout=30,
            )
            early = progress(ckpt)
            assert early["early_signal"]["source"] == "aws-rebalance"
            assert proc.poll() is None  # still training
            first = int(early["last_checkpoint_step"])
            _wait(lambda: progress(ckpt)["step"] > first + 2, timeout=30)
            aws.preempt()
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    doc = progress(ckpt)
    assert doc["state"] == "preempted" and doc["notice"]["source"] == "aws"
    assert doc["notice"]["seen_at"] > 0 and doc["last_checkpoint_step"] == doc["step"] > first
