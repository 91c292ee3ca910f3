"""Status reads on any terminal, and the operator commands around it."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from scheduler.cli import app as cli
from scheduler.cli import status as status_cli
from scheduler.cli.columns import rich_lines
from scheduler.core.errors import UserError
from scheduler.core.states import JobState
from scheduler.state import read_models
from scheduler.state.requeue import release, requeue
from tests.support.ops_world import LONG_NAME, LONG_REASON, make_ops_world

runner = CliRunner()


@pytest.fixture
def world(tmp_path: Path):
    return make_ops_world(tmp_path)


def _invoke(world, *args: str, env: dict[str, str] | None = None):
    return runner.invoke(cli.app, [*args, "-c", str(world.config)], env=env)


def test_table_fits_80_columns_with_full_ids(world):
    rows = read_models.job_rows(world.engine)
    lines = status_cli.status_plain(rows, datetime.now(UTC), width=80)
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    text = "\n".join(lines)
    for jid in world.ids.values():
        assert jid in text  # never cut: it is what people copy
    header = lines[0].split()
    assert header[:4] == ["ID", "NAME", "STATE", "AGE"] and header[-1] == "REASON"
    # On a terminal: the same lines, the state in colour, user text never markup.
    cells = [status_cli._status_cells(r, datetime.now(UTC)) for r in rows]
    lay = status_cli.status_layout(cells, 80)
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    for line in rich_lines(lay, cells, styles=status_cli.STYLES):
        console.print(line, soft_wrap=True)
    assert console.export_text().splitlines() == lines
    long_reason = status_cli.status_plain(rows, datetime.now(UTC), width=None)
    assert any("[bold]not markup[/bold]" in x for x in long_reason)
    # Wide brings back what 80 columns dropped, whole, past the terminal's edge.
    wide = status_cli.status_plain(rows, datetime.now(UTC), width=80, wide=True)
    assert "INSTANCE" in wide[0] and "INSTANCE" not in lines[0]
    assert any(LONG_REASON in x for x in wide) and any(LONG_NAME in x for x in wide)


def test_a_wide_terminal_gets_more_columns_in_priority_order(world):
    rows = read_models.job_rows(world.engine)
    cells = [status_cli._status_cells(r, datetime.now(UTC)) for r in rows]
    narrow = status_cli.status_layout(cells, 80).names
    roomy = status_cli.status_layout(cells, 160).names
    assert set(narrow) >= {"ID", "NAME", "STATE", "AGE", "REASON"}
    assert set(narrow) < set(roomy) and "COST" in roomy


def test_rows_are_active_first_then_newest(world):
    ids = [r["id"] for r in read_models.job_rows(world.engine)]
    i = world.ids
    assert ids[:3] == [i["pending"], i["running"], i["held"]]
    assert ids[3:] == [i["failed"], i["done"]]


@pytest.mark.slow
def test_real_cli_at_80_columns_piped(world):
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler", "status", "-c", str(world.config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert lines[0].split()[:4] == ["ID", "NAME", "STATE", "AGE"]
    assert "│" not in proc.stdout and "\x1b" not in proc.stdout  # plain columns when piped
    for key in ("pending", "running", "held", "failed"):
        assert world.ids[key] in proc.stdout
    # The job that finished two hours ago is hidden, and stderr says so.
    assert world.ids["done"] not in proc.stdout and "--all" in proc.stderr


def test_plain_columns_no_headers_filters_and_all(world, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    r = _invoke(world, "status", "--no-headers")
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0].split()
    assert first[0] == world.ids["pending"] and first[1] == LONG_NAME  # not cut when unbounded
    assert "ID" not in r.stdout.split()
    assert LONG_REASON in r.stdout  # no width known: nothing is cut
    r = _invoke(world, "status", "--all", "--no-headers")
    assert world.ids["done"] in r.stdout
    r = _invoke(world, "status", "--state", "failed,held", "--no-headers")
    got = {line.split()[0] for line in r.stdout.splitlines()}
    assert got == {world.ids["failed"], world.ids["held"]}
    r = _invoke(world, "status", "--team", "Vision", "--no-headers")
    assert {line.split()[0] for line in r.stdout.splitlines()} == {
        world.ids["running"],
        world.ids["pending"],
    }
    r = _invoke(world, "status", "-o", "wide")
    assert "INSTANCE" in r.stdout.splitlines()[0] and "local-running-0001" in r.stdout
    with pytest.raises(UserError, match="unknown state 'runing'"):
        runner.invoke(
            cli.app, ["status", "-s", "runing", "-c", str(world.config)], catch_exceptions=False
        )


def test_every_json_document_has_a_version_and_one_name_per_concept(world):
    docs = {
        cmd: json.loads(_invoke(world, *cmd.split(), "-o", "json").stdout)
        for cmd in ("status", f"show {world.ids['running']}", "events", "budget")
    }
    for cmd, doc in docs.items():
        assert doc["version"] == read_models.JSON_VERSION, cmd
    jobs = {j["id"]: j for j in docs["status"]["jobs"]}
    assert world.ids["done"] in jobs  # scripts get every job
    running = jobs[world.ids["running"]]
    assert running["instance_id"] == "local-running-0001" and running["cost_usd"] == 0.0
    assert "spent_usd" not in running and "instance" not in running
    shown = docs[f"show {world.ids['running']}"]
    assert set(shown["job"]) == set(running)  # the same job fields in status and show
    assert shown["attempts"][0]["instance_id"] == "local-running-0001"


def test_watch_json_streams_one_document_per_change(monkeypatch, capsys):
    docs = iter([{"a": 1}, {"a": 1}, {"a": 2}, {"a": 2}, {"a": 3}])
    monkeypatch.setattr(status_cli.time, "sleep", lambda _s: None)
    status_cli._stream_changes(lambda: next(docs), 0.0, 3)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["a"] for x in lines] == [1, 2, 3]


def test_watch_json_through_the_cli(world):
    r = _invoke(world, "status", "--watch", "-o", "json", "--count", "1")
    assert r.exit_code == 0, r.output
    (line,) = r.stdout.splitlines()
    assert json.loads(line)["version"] == read_models.JSON_VERSION


def test_stale_heartbeat_still_exits_3_with_the_footer(tmp_path):
    w = make_ops_world(tmp_path, beat=False)
    r = _invoke(w, "status")
    assert r.exit_code == 3 and "no spotwise daemon has run" in r.stderr


def test_a_daemon_starting_mid_command_is_not_both_absent_and_listed(world, monkeypatch):
    """The heartbeat is read once: a daemon whose row appears between two reads would be
    warned "no daemon has run" and listed as the lease holder in one document."""
    real, calls = read_models.daemon_heartbeat, []

    def appears_after_the_first_read(engine):  # type: ignore[no-untyped-def]
        calls.append(1)
        return None if len(calls) == 1 else real(engine)

    monkeypatch.setattr(read_models, "daemon_heartbeat", appears_after_the_first_read)
    r = _invoke(world, "status", "-o", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 3 and "no spotwise daemon has run" in doc["daemon_warning"]
    assert doc["daemon"] is None and len(calls) == 1


def test_requeue_resets_failure_counters_and_keeps_the_settled_attempt(world):
    jid = world.ids["failed"]
    requeue(world.engine, jid, datetime.now(UTC))
    job = world.job(jid)
    assert job.state is JobState.PENDING and job.reason == "requeued by user"
    assert (job.failures, job.step_failures, job.last_error, job.not_before) == (0, 0, "", None)
    assert job.settled_attempt == f"{jid}-a1"
    with pytest.raises(UserError, match="not FAILED: use 'spotwise release'"):
        requeue(world.engine, world.ids["held"], datetime.now(UTC))


def test_release_puts_a_held_job_back_and_refuses_others(world):
    r = _invoke(world, "release", world.ids["held"])
    assert r.exit_code == 0, r.output
    job = world.job(world.ids["held"])
    assert job.state is JobState.PENDING and job.held_budget is None
    with pytest.raises(UserError, match="not HELD: use 'spotwise requeue'"):
        release(world.engine, world.ids["failed"], datetime.now(UTC))


def test_cancel_a_whole_team(world):
    r = _invoke(world, "cancel", "--team", "vision", "-y")
    assert r.exit_code == 0, r.output
    assert {world.job(world.ids[k]).cancel_requested for k in ("running", "pending")} == {True}
    assert world.job(world.ids["held"]).cancel_requested is False


def test_version_and_completion():
    r = runner.invoke(cli.app, ["--version"])
    assert r.exit_code == 0 and re.fullmatch(r"spotwise \S+ \(database schema \d{4}\)\n", r.stdout)
    assert "--install-completion" in runner.invoke(cli.app, ["--help"]).stdout


def test_show_and_events_print_dates_and_zones(world, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    r = _invoke(world, "show", world.ids["failed"])
    assert r.exit_code == 0, r.output
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", r.stdout)
    r = _invoke(world, "events")
    assert r.stdout.startswith("AT (UTC)") and re.search(r"\n\d\d-\d\d \d\d:\d\d:\d\d  ", r.stdout)


@pytest.mark.slow
def test_show_reads_at_80_columns_without_cutting_what_people_copy(world):
    """The real CLI, piped at 80 columns: the pool, the instance id and the checkpoint are
    whole, each attempt is three lines (where; when, how long and what it cost; why it
    ended), and the events do not repeat the job's id on every row."""
    env = {**os.environ, "COLUMNS": "80", "TZ": "UTC", "PYTHONPATH": str(Path(__file__).parents[2])}
    jid = world.ids["failed"]
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler", "show", jid, "-c", str(world.config)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    lines = text.splitlines()
    assert "…" not in text
    (pool_line,) = [x for x in lines if "local-failed-0001" in x and "/h" in x]
    assert re.fullmatch(
        r"\s+1  local:aws/us-east-1a/p3\.2xlarge/spot  \$\d+\.\d\d/h  local-failed-0001",
        pool_line,
    )
    span = lines[lines.index(pool_line) + 1]
    # the end is a time of day, or a whole date when the attempt crossed midnight (the
    # world's attempts are stamped from the wall clock, so a run near midnight sees both)
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.fullmatch(rf"\s+{when} -> (?:\d\d:\d\d:\d\d|{when}) \(10m00s\)  \$\d+\.\d\d", span)
    assert len(span) <= 80
    why = lines[lines.index(pool_line) + 2]
    assert why.strip() == "failed: the job's command exited with code 1"
    assert f"checkpoint {world.job(jid).checkpoint_uri}\n" in text
    events = lines[lines.index("events") + 1 :]
    assert events[0].split() == ["AT", "(UTC)", "KIND", "MESSAGE"]
    assert all(len(x) <= 80 for x in events) and jid not in "".join(events)
    assert "stderr of attempt 1 is empty" in text  # it failed without a word; was "last 0 lines"


def test_times_on_the_sped_up_local_market_say_so(world):
    """The local market's clock runs ahead of the wall clock: printed times say whose."""
    world.config.write_text(world.config.read_text().replace("speedup = 1", "speedup = 120"))
    note = "local market at 120x: times are wall-clock; costs accrue in market hours"
    r = _invoke(world, "show", world.ids["running"])
    assert r.exit_code == 0, r.output
    assert note in r.stdout
    r = _invoke(world, "status")
    assert note in r.stderr
    world.config.write_text(world.config.read_text().replace("speedup = 120", "speedup = 1"))
    assert "local market at" not in _invoke(world, "show", world.ids["running"]).stdout


def test_watch_table_keeps_the_stale_daemon_footer(tmp_path, monkeypatch):
    w = make_ops_world(tmp_path, beat=False)

    def stop(_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_cli.time, "sleep", stop)
    r = _invoke(w, "status", "--watch")
    assert r.exit_code == 0, r.output
    assert "warning: no spotwise daemon has run" in r.stdout and w.ids["pending"] in r.stdout


def test_the_lease_line_fits_80_columns_and_dates_only_an_older_lease():
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    lease = {"pid": 4194304, "host": "sched-01", "epoch": 12, "status": "running"}
    # 30 s ago, but never yesterday: run just after midnight UTC it would print the date
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    line = status_cli._lease_line({**lease, "since": max(now - timedelta(seconds=30), midnight)})
    assert line is not None and len(line) <= 80, line
    assert re.search(r"holds the lease since \d\d:\d\d:\d\dZ \(\d+s, epoch 12\)$", line)
    old = status_cli._lease_line({**lease, "since": now - timedelta(days=2)})
    assert old is not None
    assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(\d+h, epoch 12\)$", old)
