"""The command table: one row per command, its help the command's own, and each command
importing only what it uses (what `spotwise --version`, `--help` and `status` cost)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app as cli
from scheduler.cli.lazy_group import load

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_is_in_the_table_with_its_own_one_line_help():
    for entry in cli.COMMANDS:
        command = load(entry)
        assert command is not None, entry.name
        first = inspect.cleandoc(command.help or "").split("\n\n")[0]
        assert " ".join(first.split()) == entry.help, entry.name
    help_text = CliRunner().invoke(cli.app, ["--help"]).stdout
    rows = help_text.split("Commands:\n")[1].splitlines()
    listed = [row.split()[0] for row in rows if row.startswith("  ") and row[2] != " "]
    assert listed == [e.name for e in cli.COMMANDS]


def test_a_mistyped_command_is_refused_with_a_suggestion():
    r = CliRunner().invoke(cli.app, ["stauts"])
    assert r.exit_code == 2 and "No such command" in r.output and "status" in r.output


PROBE = """
import sys
sys.argv = ["spotwise", *sys.argv[1:]]
from scheduler.cli.app import main
try:
    main()
except SystemExit:
    pass
heavy = ("typer", "rich", "pydantic", "sqlalchemy", "sqlmodel", "scheduler.cli.status")
print("LOADED", sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


def _loaded(*args: str) -> list[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("LOADED")]
    assert line, proc.stderr[-1000:]
    return eval(line[0].removeprefix("LOADED "))  # a list of names, printed by PROBE


@pytest.mark.slow
def test_each_command_pays_only_for_what_it_uses(tmp_path):
    from datetime import timedelta

    from scheduler.state.db import open_db
    from scheduler.state.lease import DaemonRecord

    assert _loaded("--version") == []
    assert _loaded("--help") == ["typer"]
    db = tmp_path / "s.db"
    engine = open_db(f"sqlite:///{db}")
    DaemonRecord(engine, timedelta(minutes=1)).claim("test")  # a daemon keeps it: no warning
    engine.dispose()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\ndatabase_url = "sqlite:///{db}"\n')
    # status on SQLite, piped: the config (pydantic) and Typer, never SQLAlchemy or Rich
    assert _loaded("status", "-c", str(cfg)) == ["pydantic", "scheduler.cli.status", "typer"]
