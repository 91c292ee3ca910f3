"""Config and job-file validation: one clear message naming file, key and line; exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta

import pytest

from scheduler.core.config import parse_config
from scheduler.core.errors import UserError
from scheduler.core.jobspec import jobspec_from_dict, parse_gpu
from scheduler.state.files import load_config

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
            "<f>: budgets[1] 'b'.scope (line 7): scope must be 'global', 'team:NAME', "
            "'job:NAME' or 'user:NAME'",
        ),
        ('[[budgets]]\nname = "a"\n', "<f>: budgets[0] 'a'.limit_usd: required key is missing"),
        ("[daemon\n", "<f>: not valid TOML: "),
        ("[providers.gcp]\nenabled = true\n", "providers.gcp.project"),
    ],
)
def test_bad_config_messages(text, expected):
    with pytest.raises(UserError) as e:
        parse_config(text, source="<f>")
    assert expected in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such config file"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.slow
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
    from scheduler.state.files import load_jobspec

    names = {load_jobspec(p).name for p in sorted((root / "jobs").glob("*.toml"))}
    assert names == {"llama-finetune", "tiny-trainer", "tiny-gang"}


@pytest.mark.slow
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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[daemon]\nreconcile_interval = "0s"\n', "daemon.reconcile_interval (line 2): must be at"),
        ("[daemon]\nprice_interval = 0\n", "daemon.price_interval (line 2): must be at least 0.1s"),
        ('[daemon]\naccrue_interval = "50ms"\n', "daemon.accrue_interval (line 2): must be at"),
        ('[daemon]\nleak_grace = "0s"\n', "daemon.leak_grace (line 2): must be at least"),
        ('[daemon]\nlaunch_timeout = "0m"\n', "daemon.launch_timeout (line 2): must be at least"),
        ('[daemon]\nstop_grace = "9000000d"\n', "daemon.stop_grace (line 2): a duration cannot be"),
        ("[daemon]\nstop_grace = 1e300\n", "longer than 10 years"),
        ("[daemon]\nstop_grace = inf\n", "daemon.stop_grace (line 2): inf is not allowed here"),
        ("[[budgets]]\nname = 'a'\nlimit_usd = nan\n", "budgets.0.limit_usd (line 3): nan is not"),
        ("[providers.local]\nspeedup = inf\n", "providers.local.speedup (line 2): inf is not"),
        ('[daemon]\n"a[/]b" = 1\n', "<f>: daemon.a[/]b (line 2): unknown key"),
        ("x = " + "1" * 5000 + "\n", "<f>: not valid TOML: "),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "<f>: not valid TOML: nested too deeply"),
        (
            '[providers.local]\nclouds = ["gpc"]\n',
            "providers.local.clouds (line 2): the local market has no cloud 'gpc'; did you mean "
            "'gcp'?",
        ),
        ('[providers.local]\nregions = ["mars-1"]\n', "the local market has no region 'mars-1'"),
        ('[daemon]\nteams = ["a", "A"]\n', "daemon.teams (line 2): team names must be unique"),
        (
            '[daemon]\nteams = ["research"]\n[[budgets]]\nname = "r"\nscope = "team:reserch"\n'
            "limit_usd = 1\n",
            "<f>: budgets[0] 'r'.scope (line 5): team 'reserch' is not in daemon.teams "
            "(did you mean 'research'?)",
        ),
    ],
)
def test_config_refusals(text, expected):
    with pytest.raises(UserError) as e:
        parse_config(text, source="<f>")
    assert expected in str(e.value)


def test_team_budget_scope_is_case_insensitive():
    cfg = parse_config('[[budgets]]\nname = "r"\nscope = "team:Research"\nlimit_usd = 5\n')
    assert cfg.budget_rules()[0].scope == "team:research"


@pytest.mark.parametrize(
    "line",
    [
        "x = " + "1" + " " * 200_000 + "x",
        "[" + " " * 200_000,
        "[[" + " a" * 100_000,
        'reconcile_interval = "1' + " " * 200_000 + 'x"',
        '"' + "a" * 200_000 + '" = 1',
        'gpus = "A' + " " * 200_000 + '!"',
    ],
)
def test_huge_values_are_refused_quickly(tmp_path, line):
    import time

    from scheduler.state.files import load_jobspec

    for text in (line, "[daemon]\n" + line):
        t = time.monotonic()
        with pytest.raises(UserError):
            parse_config(text, source="<f>")
        f = tmp_path / "job.toml"
        f.write_text('name = "x"\ncommand = ["a"]\n' + line + "\n")
        with pytest.raises(UserError):
            load_jobspec(f)
        assert time.monotonic() - t < 10.0  # the quadratic regexes took 100 s


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x00\x01\x02\xff\xfe binary", "not a text file (invalid UTF-8 at byte 3)"),
        (b"[daemon]\nowner = '\xc3\x28'\n", "not a text file (invalid UTF-8 at byte 18)"),
        (b"[daemon]\x00\n", "not valid TOML"),
    ],
)
def test_unreadable_files(tmp_path, data, expected):
    from scheduler.state.files import load_jobspec

    f = tmp_path / "f.toml"
    f.write_bytes(data)
    for loader in (load_config, load_jobspec):
        with pytest.raises(UserError, match=re.escape(expected)):
            loader(f)
    with pytest.raises(UserError, match="is a directory"):
        load_config(tmp_path)
    with pytest.raises(UserError, match="not a regular file"):
        load_jobspec("/dev/zero")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
def test_database_password_is_never_printed(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\ndatabase_url = "postgresql://alice:hunter2@db.example/spotwise"\n')
    r = _cli("check-config", str(cfg))
    assert r.returncode == 0 and "postgresql://alice:***@db.example/spotwise" in r.stdout
    r = _cli("check-config", str(cfg), "-o", "json")
    assert '"database_url": "postgresql://alice:***@db.example/spotwise"' in r.stdout
    cfg.write_text('[daemon]\ndatabase_url = "nosuch+x://alice:hunter2@db.example/spotwise"\n')
    r = _cli("status", "-c", str(cfg))
    assert r.returncode == 2 and "alice:***@" in r.stderr
    assert "hunter2" not in r.stdout + r.stderr


@pytest.mark.slow
def test_corrupted_database_is_one_line(tmp_path):
    db = tmp_path / "db.sqlite"
    db.write_bytes(b"this is not sqlite" * 300)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[daemon]\ndatabase_url = "sqlite:///{db}"\n')
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\ncommand = ["a"]\n')
    for args in (("status", "-c", str(cfg)), ("submit", str(job), "-c", str(cfg))):
        r = _cli(*args)
        assert r.returncode == 2
        assert r.stderr == (
            f"error: the database at sqlite:///{db} is not a spotwise database or is "
            "corrupted: file is not a database\n"
        )


@pytest.mark.slow
def test_markup_in_user_text_is_printed_verbatim(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\n"[/]" = 1\n"[red]x[/red]" = 2\n')
    r = _cli("check-config", str(bad))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"error: {bad}: daemon.[/] (line 2): unknown key (check the spelling)",
        f"error: {bad}: daemon.[red]x[/red] (line 3): unknown key (check the spelling)",
    ]
