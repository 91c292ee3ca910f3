"""A plan before spending: `submit --dry-run` shows what the daemon's placement would do
with a job now and why every other kind of offering is out, and writes nothing; the job
and config files' mistakes are named with a fix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

BUDGET = """
[[budgets]]
name = "research"
scope = "team:research"
limit_usd = 0.1
window = "month"
hard = true
"""
JOB = """\
name = "probe"
team = "research"
command = ["python", "train.py"]
gpus = ["V100:1", "H100:8", "MI300X:1"]
gpu_hours = 2
max_price_per_hour = 20
"""


def _state(root: Path) -> dict[str, str]:
    """Every file under the state directory and a hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path):
    w = make_ops_world(tmp_path)
    w.config.write_text(w.config.read_text() + BUDGET)
    job = tmp_path / "probe.toml"
    job.write_text(JOB)
    state = tmp_path / "state"
    w.engine.dispose()  # type: ignore[attr-defined]
    before = _state(state)
    r = spotwise("submit", "--dry-run", str(job), "-c", str(w.config))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"{job}: a valid job file: probe (team research)\n")
    assert "  asked: gpus V100:1 or H100:8 or MI300X:1, 2 GPU-hours, spot prefer, max $20/h" in out
    assert "would take local:aws/" in out or "would take local:azure/" in out
    taken = next(x for x in out.splitlines() if x.startswith("would take "))
    assert "/spot at $" in taken
    assert "expected $" in out and "to finish (interruptions and restarts included)" in out
    assert "next best:" in out
    assert "  MI300X:1 spot: none listed now" in out
    assert "  MI300X:1 on-demand: none listed now" in out
    assert "  H100:8 on-demand: over max_price_per_hour $20/h (cheapest $" in out
    assert "  H100:8 spot: budget research would be exceeded ($" in out
    assert "  V100:1 on-demand: budget research would be exceeded ($3.06/h > $2.40/h)" in out
    assert "draws on:\n  budget research (team:research, hard): $0.00 of $0.10 spent" in out
    assert r.stderr.strip().endswith("dry run: nothing was submitted or written")
    assert all(len(x) <= 80 for x in out.splitlines()[1:] if not x.startswith("would take"))
    assert _state(state) == before  # not a job, not an event, not a file
    doc = json.loads(spotwise("submit", "--dry-run", str(job), "-c", str(w.config),
                              "-o", "json").stdout)  # fmt: skip
    assert doc["dry_run"] and doc["placed"] and doc["choice"]["market"] == "spot"
    assert doc["choice"]["provider"] == "local" and doc["expected_cost_is"] == "to_finish"
    assert {x["what"] for x in doc["not_taken"]} >= {"MI300X:1 spot", "V100:1 on-demand"}
    assert [b["name"] for b in doc["budgets"]] == ["research"]
    assert _state(state) == before


@pytest.mark.slow
def test_a_job_that_cannot_be_placed_says_why(tmp_path: Path):
    w = make_ops_world(tmp_path)
    job = tmp_path / "big.toml"
    job.write_text('name = "big"\ncommand = ["x"]\ngpus = "H100:8"\nmax_price_per_hour = 5\n')
    r = spotwise("submit", "--dry-run", str(job), "-c", str(w.config))
    assert r.returncode == 0, r.stderr
    assert "would wait: no offering with 8x H100 under $5/h (cheapest is $" in r.stdout
    assert "draws on: no budget covers this job" in r.stdout


@pytest.mark.slow
def test_file_mistakes_are_named_with_a_fix(tmp_path: Path):
    config = tmp_path / "c.toml"
    config.write_text(
        '[daemon]\nreconcile_intervall = "5s"\n\n[[budgets]]\nname = "a"\nlimit_usd = 5\n\n'
        '[[budgets]]\nname = "vision"\nlimit_usd = -5\n'
    )
    r = spotwise("check-config", str(config))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"error: {config}: daemon.reconcile_intervall (line 2): unknown key (did you mean "
        "'reconcile_interval'?)",
        f"error: {config}: budgets[1] 'vision'.limit_usd (line 10): Input should be greater than 0",
    ]
    job = tmp_path / "j.toml"
    job.write_text(
        'name = "x"\ncommand = "python train.py --lr 3"\ngpu_hour = 2\ngpus = "A10O:1"\n'
    )
    for args in (["check-config", str(job)], ["submit", "--dry-run", str(job)]):
        r = spotwise(*args)
        assert r.returncode == 2, args
        lines = r.stderr.splitlines()
        assert (
            f"error: {job}: command (line 2): give the command as a list of arguments, e.g. "
            'command = ["python", "train.py", "--lr", "3"] (a string is not split by a shell)'
            in lines
        )
        assert f"error: {job}: gpu_hour (line 3): unknown key (did you mean 'gpu_hours'?)" in lines
        assert any(
            "unknown GPU model 'A10O' (did you mean 'A100:1' or 'A10:1'?)" in x for x in lines
        )
    good = tmp_path / "good.toml"
    good.write_text('name = "ok"\ncommand = ["x"]\ngpus = "T4:1"\n')
    r = spotwise("check-config", str(good))
    assert r.returncode == 0 and r.stdout.startswith(f"ok {good}: a job file (ok, team default, "
                                                     "gpus T4:1)")  # fmt: skip
