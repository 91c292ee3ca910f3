"""Job logs through the CLI, and the daemon's own log lines."""

from __future__ import annotations

import io
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from scheduler.cli import app as cli
from scheduler.cli import logs as logs_cli
from scheduler.core.config import local_settings
from scheduler.core.errors import UserError
from scheduler.core.read_settings import ReadSettings
from scheduler.daemon.logs import configure, journal_attached, redact, resolve_level
from scheduler.state import read_models
from scheduler.state.audit import emit
from scheduler.state.files import load_config
from scheduler.state.models import Attempt
from tests.support.ops_world import make_ops_world

runner = CliRunner()


@pytest.fixture
def world(tmp_path: Path):
    w = make_ops_world(tmp_path)
    cfg = load_config(w.config)
    d = read_models.local_instance_dir(ReadSettings.of_config(cfg), "local-failed-0001")
    d.mkdir(parents=True)
    (d / "stdout.log").write_text("step 1\nstep 2\n")
    (d / "stderr.log").write_text("".join(f"warn {i}\n" for i in range(30)) + "Traceback: boom\n")
    with Session(w.engine) as s:  # type: ignore[arg-type]
        for a in s.get(Attempt, f"{w.ids['failed']}-a1"), s.get(Attempt, f"{w.ids['running']}-a1"):
            assert a is not None
            a.provider = "local" if a.job_id == w.ids["failed"] else "aws"
            s.add(a)
        s.commit()
    return w


def _invoke(w, *args: str):
    return runner.invoke(cli.app, [*args, "-c", str(w.config)])


def test_local_log_dir_is_the_markets_instance_dir(world):
    from providers.local.market import LocalMarket

    cfg = load_config(world.config)
    market = LocalMarket(local_settings(cfg))
    assert read_models.local_instance_dir(
        ReadSettings.of_config(cfg), "local-x"
    ) == market.instance_dir("local-x")


def test_logs_prints_stdout_and_stderr_of_the_attempt(world):
    jid = world.ids["failed"]
    r = _invoke(world, "logs", jid)
    assert r.exit_code == 0, r.output
    assert "==> stdout.log <==\nstep 1\nstep 2\n==> stderr.log <==" in r.stdout
    assert "Traceback: boom" in r.stdout
    r = _invoke(world, "logs", jid, "--stream", "stderr", "--attempt", "1")
    assert "step 1" not in r.stdout and "warn 0" in r.stdout
    with pytest.raises(UserError, match="no attempt 2 \\(attempts: 1\\)"):
        runner.invoke(
            cli.app, ["logs", jid, "-a", "2", "-c", str(world.config)], catch_exceptions=False
        )


@pytest.mark.slow
def test_follow_on_a_finished_job_prints_everything_and_returns(world):
    """The attempt ended and the job with it: its output, how it ended, exit 1 (FAILED)."""
    r = _invoke(world, "logs", world.ids["failed"], "-f", "--stream", "stdout")
    assert r.exit_code == 1, r.output
    assert r.stdout == (
        "step 1\nstep 2\n"
        "==> attempt 1 on local:aws/us-east-1a/p3.2xlarge/spot ended: failed: the job's "
        "command exited with code 1 <==\n"
        "==> job FAILED: exit code 1 <==\n"
    )


def test_follow_prints_lines_as_they_arrive_until_the_attempt_ends(tmp_path):
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    out.write_text("a\npart")
    polls = iter([True, True, True, False, False])
    got: list[str] = []

    def sleep(_s: float) -> None:
        with out.open("a") as f:
            f.write("ial\n" if len(got) == 1 else "")
        if not err.exists():
            err.write_text("e1\n")

    logs_cli.tail_until_ended([out, err], lambda: next(polls), got.append, sleep=sleep)
    assert got == ["a", "partial", "e1"]  # whole lines, both files, in arrival order


def test_show_prints_where_the_logs_are_and_the_end_of_stderr_when_failed(world):
    r = _invoke(world, "show", world.ids["failed"])
    assert r.exit_code == 0, r.output
    d = read_models.local_instance_dir(
        ReadSettings.of_config(load_config(world.config)), "local-failed-0001"
    )
    assert str(d) in r.stdout
    assert "last 10 lines of stderr (attempt 1):" in r.stdout
    assert "Traceback: boom" in r.stdout and "warn 21" in r.stdout and "warn 20\n" not in r.stdout


def test_cloud_attempts_say_where_the_output_is(world):
    r = _invoke(world, "logs", world.ids["running"])
    assert r.exit_code == 1
    assert "/var/log/spotwise/job.log" in r.stderr and "local-running-0001" in r.stderr
    assert "aws ec2 get-console-output --region us-east-1" in r.stderr
    r = _invoke(world, "show", world.ids["running"])
    assert "logs: stdout and stderr are in /var/log/spotwise/job.log" in r.stdout


def _lines(journal: bool, fn) -> list[str]:
    buf = io.StringIO()
    configure("INFO", stream=buf, journal=journal)
    try:
        fn()
    finally:
        configure("WARNING", stream=io.StringIO(), journal=False)
    return buf.getvalue().splitlines()


def test_journal_lines_carry_syslog_priorities_and_no_timestamp(tmp_path):
    def log_some() -> None:
        logging.getLogger("spotwise.daemon").error("task reconcile failed")
        logging.getLogger("spotwise.daemon").info("running")
        w = make_ops_world(tmp_path)
        with Session(w.engine) as s:  # type: ignore[arg-type]
            emit(s, datetime.now(UTC), "failed", "exit code 1", job_id="j-x", level="warning")

    lines = _lines(True, log_some)
    assert "<3>spotwise.daemon: task reconcile failed" in lines
    assert "<6>spotwise.daemon: running" in lines
    assert "<4>spotwise: [j-x] failed: exit code 1" in lines
    assert not any(line[3:4].isdigit() for line in lines)  # journald adds the time


def test_plain_lines_have_one_utc_timestamp_and_one_line_per_event():
    def boom() -> None:
        try:
            raise RuntimeError("first\nsecond")
        except RuntimeError:
            logging.getLogger("spotwise").exception("task failed")

    (line,) = _lines(False, boom)
    stamp, level, rest = line.split(" ", 2)
    assert stamp.endswith("Z") and len(stamp) == 24 and level == "ERROR"
    assert "Traceback" in rest and "first\\nsecond" in rest


def test_credentials_are_never_logged():
    secret_line = (
        "connect postgresql://spot:hunter2@db/spotwise failed; AKIAABCDEFGHIJKLMNOP "
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG Authorization: Bearer eyJhbGciOi "
        "https://s3/x?X-Amz-Signature=abcdef123&x=1"
    )
    (line,) = _lines(False, lambda: logging.getLogger("spotwise").warning(secret_line))
    for secret in ("hunter2", "ABCDEFGHIJKLMNOP", "wJalrXUtnFEMI", "eyJhbGciOi", "abcdef123"):
        assert secret not in line, secret
    assert redact("reconcile_interval: 5s") == "reconcile_interval: 5s"


def test_journal_is_detected_only_when_stderr_is_the_journal_stream(tmp_path, monkeypatch):
    f = (tmp_path / "stream").open("w")
    st = os.fstat(f.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert journal_attached(f)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
    assert not journal_attached(f)
    monkeypatch.delenv("JOURNAL_STREAM")
    assert not journal_attached(f)
    f.close()


def test_log_level_is_configurable(monkeypatch):
    assert resolve_level("INFO") == "INFO"
    monkeypatch.setenv("SPOTWISE_LOG_LEVEL", "debug")
    assert resolve_level("INFO") == "DEBUG"
    assert resolve_level("INFO", "error") == "ERROR"
    with pytest.raises(UserError, match="unknown log level 'LOUD'"):
        resolve_level("INFO", "loud")
