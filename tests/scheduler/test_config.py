"""Config and job-file validation: one clear message naming file, key and line; exit 2."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from scheduler.config import load_config, parse_config
from scheduler.errors import UserError
from scheduler.jobspec import jobspec_from_dict, parse_gpu

GOOD = """
[daemon]
reconcile_interval = "15s"
price_interval = "5m"

[providers.local]
speedup = 10

[[budgets]]
name = "research"
scope = "team:research"
limit_usd = 100
window = "week"

[[budgets]]
name = "all"
limit_usd = 1000
hard = false
"""


def test_good_config_parses():
    cfg = parse_config(GOOD)
    assert cfg.daemon.reconcile_interval == timedelta(seconds=15)
    assert cfg.daemon.price_interval == timedelta(minutes=5)
    assert cfg.providers.local.speedup == 10
    rules = cfg.budget_rules()
    assert [(r.name, r.scope, r.window.value, r.hard) for r in rules] == [
        ("research", "team:research", "week", True),
        ("all", "global", "month", False),
    ]


def test_no_provider_means_local_market():
    assert parse_config("").providers.local is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[daemon]\nreconcile_interval = "soon"\n',
            "<f>: daemon.reconcile_interval (line 2): expected a duration",
        ),
        (
            "[daemon]\nreconcile_intervl = '5s'\n",
            "<f>: daemon.reconcile_intervl (line 2): unknown key",
        ),
        (
            '[[budgets]]\nname = "a"\nlimit_usd = 1\n\n'
            '[[budgets]]\nname = "b"\nscope = "teams:x"\nlimit_usd = 2\n',
            "<f>: budgets.1.scope (line 7): scope must be 'global', 'team:NAME' or 'job:NAME'",
        ),
        ('[[budgets]]\nname = "a"\n', "<f>: budgets.0.limit_usd: required key is missing"),
        ("[daemon\n", "<f>: not valid TOML: "),
        ("[providers.gcp]\nenabled = true\n", "not available in this version"),
    ],
)
def test_bad_config_messages(text, expected):
    with pytest.raises(UserError) as e:
        parse_config(text, source="<f>")
    assert expected in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such config file"):
        load_config(tmp_path / "nope.toml")


def test_check_config_cli_exit_code_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\naccrue_interval = -5\n")
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "check-config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert f"{bad}: daemon.accrue_interval (line 2)" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "check-config", str(good)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "check-config", str(good), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = __import__("json").loads(r.stdout)
    assert doc["ok"] and doc["providers"] == ["local"] and doc["budgets"] == ["research", "all"]


def test_gpu_specs():
    assert parse_gpu("A100:8").model == "A100" and parse_gpu("A100:8").count == 8
    g = parse_gpu("h100-80GB:1")
    assert (g.model, g.count, g.min_memory_gb) == ("H100", 1, 80)
    assert parse_gpu("any:2").model is None
    with pytest.raises(ValueError):
        parse_gpu("A100:0")


def test_jobspec_errors_name_the_key():
    with pytest.raises(UserError) as e:
        jobspec_from_dict({"name": "x", "command": "python train.py", "gpus": "A100:8"}, "job.toml")
    assert "job.toml: command: " in str(e.value)
    with pytest.raises(UserError, match=r"job\.toml: spot: "):
        jobspec_from_dict({"name": "x", "command": ["a"], "spot": "sometimes"}, "job.toml")
    spec = jobspec_from_dict(
        {"name": "x", "command": ["a"], "gpus": ["A100:8", "H100:8"], "gpu_memory_gb": 40}
    )
    assert [(g.model, g.min_memory_gb) for g in spec.gpu_specs()] == [("A100", 40), ("H100", 40)]


def test_shipped_examples_validate():
    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "deploy"
    cfg = load_config(root / "spotwise.toml")
    assert cfg.providers.local is not None and len(cfg.budgets) == 2
    from scheduler.jobspec import load_jobspec

    names = {load_jobspec(p).name for p in sorted((root / "jobs").glob("*.toml"))}
    assert names == {"llama-finetune", "tiny-trainer"}


def test_submit_rejects_a_bad_job_file_clearly(tmp_path):
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\ndatabase_url = "sqlite:///{tmp_path}/db.sqlite"\n')
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\ncommand = ["train"]\ngpus = "A100:eight"\nspot = "maybe"\n')
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "submit", str(job), "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert f"{job}: gpus (line 3): GPU spec 'A100:eight'" in r.stderr
    assert f"{job}: spot (line 4): " in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "db.sqlite").exists()  # nothing was enqueued
