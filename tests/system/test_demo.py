"""The README's demo command works: interruption, migration, a binding budget, the cost table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest


def spotwise(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, COLUMNS="80"),
    )


def read_json(*args: str) -> dict:
    r = spotwise(*args, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.timeout(300)
def test_demo_runs_end_to_end(tmp_path):
    r = spotwise("demo", "--workdir", str(tmp_path), timeout=290)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "what it cost" in r.stdout and "saved" in r.stdout
    # It reads on an 80-column terminal: only the copyable commands may run past it.
    lines = r.stdout.splitlines()
    hints = lines[lines.index(next(x for x in lines if "inspect it with:" in x)) + 1 :]
    wide = [ln for ln in lines if len(ln) > 80 and ln not in hints]
    assert not wide, wide
    # Its hints run as printed (real job names, a program that exists), and succeed.
    assert hints and all("<" not in h for h in hints)
    for hint in hints:
        ran = subprocess.run(
            hint.strip(),
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, COLUMNS="80"),
        )
        assert ran.returncode == 0, (hint, ran.stdout[-1000:], ran.stderr[-1000:])
    assert re.search(r"^train-v100: \S+/spot -> ", r.stdout, re.M), r.stdout[-2000:]
    cfg = str(tmp_path / "spotwise.toml")
    jobs = {j["name"]: j for j in read_json("status", "-c", cfg)["jobs"]}
    v100 = jobs["train-v100"]
    assert v100["state"] == "SUCCEEDED" and v100["recoveries"] >= 1
    assert v100["progress_step"] == v100["total_steps"] > 0  # the last step, not one before
    # The migrated trainer resumed from its checkpoint, not from step 0.
    logs = [p.read_text() for p in (tmp_path / "market" / "instances").glob("*/stderr.log")]
    resumed = [int(m) for log in logs for m in re.findall(r"resumed from step-(\d+)", log)]
    assert resumed and max(resumed) > 0
    # Every stop (interruption, price move, budget) checkpointed and exited; none crashed.
    assert not [log for log in logs if "Traceback" in log], logs
    assert jobs["finetune-t4"]["state"] == "HELD"
    assert jobs["pretrain-8xh100"]["state"] == "CANCELLED"
    budgets = read_json("budget", "-c", cfg)["budgets"]
    research = next(b for b in budgets if b["name"] == "research")
    # The hard budget bound and was not overrun.
    assert jobs["finetune-t4"]["cost_usd"] <= research["limit_usd"]
    assert jobs["finetune-t4"]["cost_usd"] > 0.5 * research["limit_usd"]


def test_the_saving_of_a_job_that_paid_on_demand_prints_0_not_minus_0():
    """An on-demand job's paid and on-demand figures differ by rounding of the hours; the
    demo printed "-0%" for it."""
    from scheduler.lab.demo import percent_saved

    assert percent_saved(0.4012, 0.4009) == "0%"
    assert percent_saved(2.356, 5.731) == "59%"
    assert percent_saved(1.02, 1.0) == "-2%"  # a real overrun still shows
