"""An attempt placed while the previous one still saves ($SPOTWISE_CLAIM_WAIT): the trainer
touches the store only once owner.json names it, then resumes from the checkpoint the old
attempt's final save left; it gives up cleanly when the bound passes or it is stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.trainer_runs import REPO, env, progress, run_trainer, tiny_args
from trainer import EXIT_FENCED, EXIT_OK, EXIT_PREEMPTED, EXIT_UNCLAIMED, EXIT_USAGE, contract
from trainer.checkpoint import parse_latest
from trainer.fence import await_claim
from trainer.storage import open_store

JOB = "j-handover"


def _owner(ckpt: Path, attempt: int) -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    text = contract.owner_doc(attempt, f"{JOB}-a{attempt}", JOB)
    tmp = ckpt / "owner.json.tmp"
    tmp.write_text(text)
    tmp.replace(ckpt / contract.OWNER)  # as the daemon's claim: never half-written


def _start(argv: list[str], stderr=subprocess.PIPE, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer", *argv],
        cwd=REPO,
        env=env(SPOTWISE_JOB_ID=JOB, **extra),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )


def _wait(pred, what: str, proc: subprocess.Popen[str], limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, what
        assert proc.poll() is None, f"{what}: exited {proc.returncode}"
        time.sleep(0.02)  # waiting on a real process


@pytest.mark.timeout(240)
def test_waits_for_the_store_then_resumes_from_the_old_attempts_final_save(tmp_path):
    ckpt = tmp_path / "c"
    _owner(ckpt, 1)
    common = {
        "checkpoint__interval_steps": 1000,  # only the final save: its step is the resume
        "training__steps": 200,
        "training__step_delay_seconds": 0.05,
    }
    first = _start(tiny_args(ckpt, **common), SPOTWISE_ATTEMPT="1")
    second = None
    try:
        _wait(lambda: (ckpt / contract.PROGRESS).exists() and progress(ckpt)["step"] >= 6,
              "attempt 1 trains", first)  # fmt: skip
        # Attempt 2 starts while attempt 1 runs and has not saved yet: it must wait.
        metrics = tmp_path / "second.jsonl"
        log2 = tmp_path / "second.log"
        with log2.open("w") as sink:
            second = _start(
                tiny_args(ckpt, debug__metrics_file=str(metrics), **common),
                stderr=sink,
                SPOTWISE_ATTEMPT="2",
                SPOTWISE_CLAIM_WAIT="120",
            )
        waiting = "waiting up to 120s for owner.json to name attempt 2"
        _wait(lambda: waiting in log2.read_text(), "attempt 2 waits for the store", second)
        assert not metrics.exists() and progress(ckpt)["attempt"] == "1"
        first.send_signal(signal.SIGTERM)  # the notice: attempt 1 saves and exits 75
        _, err1 = first.communicate(timeout=90)
        assert first.returncode == EXIT_PREEMPTED, err1[-2000:]
        final = parse_latest((ckpt / contract.LATEST).read_text())
        assert final is not None and final >= 6
        assert second.poll() is None and not metrics.exists()  # still waiting for the store
        _owner(ckpt, 2)  # the daemon hands the store over once attempt 1 has ended
        second.wait(timeout=180)
        assert second.returncode == EXIT_OK, log2.read_text()[-2000:]
        assert f"loaded step-{final}" in log2.read_text()
        steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
        assert steps[0] == final + 1 and steps[-1] == 200  # exactly from the final save
        assert contract.written_by((ckpt / contract.DONE).read_text()) == JOB
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()


@pytest.mark.timeout(90)
def test_gives_up_untouched_when_the_store_is_never_handed_over(tmp_path):
    ckpt = tmp_path / "c"
    _owner(ckpt, 1)
    out = run_trainer(
        tiny_args(ckpt), SPOTWISE_JOB_ID=JOB, SPOTWISE_ATTEMPT="2", SPOTWISE_CLAIM_WAIT="1"
    )
    assert out.returncode == EXIT_UNCLAIMED, out.stderr[-2000:]
    assert "owner.json never named attempt 2 within 1 s" in out.stderr
    assert "Traceback" not in out.stderr
    # No progress, no step, no latest: the store as it was.
    assert sorted(p.name for p in ckpt.iterdir()) == [contract.OWNER]


@pytest.mark.timeout(90)
def test_sigterm_while_waiting_exits_75_having_written_nothing(tmp_path):
    ckpt = tmp_path / "c"
    _owner(ckpt, 1)
    log = tmp_path / "trainer.log"
    with log.open("w") as sink:
        proc = _start(tiny_args(ckpt), sink, SPOTWISE_ATTEMPT="2", SPOTWISE_CLAIM_WAIT="60")
    try:
        waiting = "waiting up to 60s for owner.json to name attempt 2"
        _wait(lambda: waiting in log.read_text(), "the trainer waits for the store", proc, 60)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = log.read_text()
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    assert "SIGTERM while waiting for the store" in err
    assert not (ckpt / contract.PROGRESS).exists() and not (ckpt / contract.LATEST).exists()


def test_await_claim_outcomes(tmp_path):
    store = open_store(str(tmp_path))
    assert await_claim(store, 2, JOB, None) == "owned"  # no wait asked for
    _owner(tmp_path, 1)
    assert await_claim(store, 2, JOB, 0.05, poll=0.01) == "timeout"
    assert await_claim(store, 2, JOB, 5, stop=lambda: True) == "stopped"
    _owner(tmp_path, 3)
    assert await_claim(store, 2, JOB, 5) == "fenced"
    _owner(tmp_path, 2)
    assert await_claim(store, 2, JOB, 5) == "owned"
    assert contract.claim_wait({"SPOTWISE_CLAIM_WAIT": "12.5"}) == 12.5


def test_claim_wait_unset_or_empty_is_no_wait_anything_else_bad_is_a_usage_error():
    assert contract.claim_wait({}) is None
    for empty in ("", "  "):
        assert contract.claim_wait({"SPOTWISE_CLAIM_WAIT": empty}) is None
    for bad in ("0", "-3", "nan", "inf", "-inf", "soon"):
        with pytest.raises(ValueError) as e:
            contract.claim_wait({"SPOTWISE_CLAIM_WAIT": bad})
        assert str(e.value) == f"SPOTWISE_CLAIM_WAIT: expected seconds > 0, got {bad!r}"


@pytest.mark.timeout(90)
def test_a_bad_claim_wait_exits_2_with_one_line_having_touched_nothing(tmp_path):
    ckpt = tmp_path / "c"
    _owner(ckpt, 1)
    out = run_trainer(
        tiny_args(ckpt), SPOTWISE_JOB_ID=JOB, SPOTWISE_ATTEMPT="2", SPOTWISE_CLAIM_WAIT="inf"
    )
    assert out.returncode == EXIT_USAGE, out.stderr[-2000:]
    line = "trainer: error: SPOTWISE_CLAIM_WAIT: expected seconds > 0, got 'inf'"
    assert [ln for ln in out.stderr.splitlines() if "SPOTWISE_CLAIM_WAIT" in ln] == [line]
    assert "Traceback" not in out.stderr and "waiting up to" not in out.stderr
    assert sorted(p.name for p in ckpt.iterdir()) == [contract.OWNER]


@pytest.mark.timeout(90)
def test_a_newer_owner_while_waiting_exits_76_with_the_fenced_line(tmp_path):
    ckpt = tmp_path / "c"
    _owner(ckpt, 3)
    out = run_trainer(
        tiny_args(ckpt), SPOTWISE_JOB_ID=JOB, SPOTWISE_ATTEMPT="2", SPOTWISE_CLAIM_WAIT="60"
    )
    assert out.returncode == EXIT_FENCED, out.stderr[-2000:]
    fenced = [ln for ln in out.stderr.splitlines() if "fenced: " in ln]
    assert len(fenced) == 1, out.stderr[-2000:]
    assert f"{contract.OWNER} names attempt 3, this is attempt 2" in fenced[0]
    assert f"exit {EXIT_FENCED}" in fenced[0]
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in ckpt.iterdir()) == [contract.OWNER]


@pytest.mark.timeout(90)
def test_preemptible_waits_too(tmp_path):
    """Your own loop through `trainer.Preemptible` honours the wait the same way."""
    ckpt = tmp_path / "c"
    _owner(ckpt, 1)
    out = subprocess.run(
        [sys.executable, "-m", "trainer.examples.own_loop", "--steps", "5"],
        cwd=REPO,
        env=env(
            SPOTWISE_JOB_ID=JOB,
            SPOTWISE_ATTEMPT="2",
            SPOTWISE_CLAIM_WAIT="1",
            SPOTWISE_CHECKPOINT_URI=str(ckpt),
        ),
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert out.returncode == EXIT_UNCLAIMED, out.stderr[-2000:]
    assert sorted(p.name for p in ckpt.iterdir()) == [contract.OWNER]
