"""Output people can read at 80 columns, on one clock.

The real CLI in a new process with COLUMNS=80: `status`, `events`, `prices`, `budget` and
`show` print plain columns, one line per row; ids, STATE, TYPE, ZONE and MARKET are never
cut (the free text is shortened, at a word); `-o wide` runs past the edge rather than cut.
On the sped-up local market every time and age is the wall clock.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session

from scheduler.cli.common import ScreenClock, money
from scheduler.core.clock import ScaledClock
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, BudgetSpend, Job
from tests.support.cli_run import spotwise
from tests.support.ops_world import LONG_NAME, LONG_REASON, make_ops_world

LONG_MESSAGE = (
    "local-0123456789abcdef on aws/us-east-1a/p4d.24xlarge/spot ended: interrupted "
    "(exit 75) after the cloud reclaimed it with a two-minute notice"
)
BUDGETS = """
[[budgets]]
name = "company-wide-research"
scope = "team:research"
limit_usd = 500
window = "month"

[[budgets]]
name = "company"
scope = "global"
limit_usd = 5000
hard = false
"""


@pytest.fixture
def world(tmp_path: Path):
    w = make_ops_world(tmp_path)
    w.config.write_text(w.config.read_text() + BUDGETS)
    now = datetime.now(UTC)
    with Session(w.engine) as s:  # type: ignore[arg-type]
        for i in range(6):
            emit(s, now, "attempt_interrupted", f"{i}: {LONG_MESSAGE}", job_id=w.ids["running"])
        for name, scope, window, hard, state in (
            ("company-wide-research", "team:research", "month", True, "exhausted"),
            ("company", "global", "month", False, "warning"),
        ):
            s.add(
                BudgetSpend(
                    name=name,
                    scope=scope,
                    window=window,
                    limit_usd=500,
                    hard=hard,
                    spent_usd=499.5,
                    state=state,
                    updated_at=now,
                )
            )
        s.commit()
    return w


def _fits(text: str) -> None:
    lines = text.splitlines()
    assert all(len(x) <= 80 for x in lines), max(lines, key=len)
    assert "│" not in text and "┃" not in text  # no box: plain columns


def _cut_at_a_word(shown: str, full: str) -> bool:
    """`shown` is `full`, or its beginning cut where a word ends and marked '…'; a single
    token too long for the column is the one thing cut inside (no word ended late enough)."""
    if not shown.endswith("…"):
        return shown == full
    head = shown[:-1]
    if not full.startswith(head):
        return False
    at_a_word = len(full) == len(head) or full[len(head)] in " ,;:"
    return at_a_word or head.rfind(" ") < 0.6 * len(shown)


@pytest.mark.slow
def test_events_are_one_line_each_and_cut_the_message_at_a_word(world):
    r = spotwise("events", "-c", str(world.config))
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    lines = r.stdout.splitlines()
    doc = json.loads(spotwise("events", "-c", str(world.config), "-o", "json").stdout)
    assert len(lines) == 1 + len(doc["events"])  # a header, then one line per event
    assert lines[0].split()[:4] == ["AT", "(UTC)", "JOB", "KIND"]
    for line, e in zip(lines[1:], doc["events"], strict=True):
        assert e["kind"] in line.split()  # the kind whole
        message = line[lines[0].index("MESSAGE") :]
        assert _cut_at_a_word(message, e["message"]), (message, e["message"])
    wide = spotwise("events", "-o", "wide", "-c", str(world.config)).stdout
    assert LONG_MESSAGE in wide  # -o wide: whole, past the edge


@pytest.mark.slow
def test_prices_never_cut_type_zone_or_market(world):
    cfg = str(world.config)
    r = spotwise("prices", "--gpu", "A100", "--limit", "100", "-c", cfg)
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    _header, *rows = r.stdout.splitlines()
    offers = json.loads(spotwise("prices", "--gpu", "A100", "-c", cfg, "-o", "json").stdout)
    assert len(rows) == len(offers["offerings"]) > 0
    for row, o in zip(rows, offers["offerings"], strict=True):
        words = row.split()
        assert o["zone"] in words and o["instance_type"] in words and o["market"] in words, row


@pytest.mark.slow
def test_budget_shows_names_and_states_whole(world):
    r = spotwise("budget", "-c", str(world.config))
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}
    assert rows["company-wide-research"][-1] == "exhausted"
    assert rows["company"][-1] == "warning"


@pytest.mark.slow
def test_status_and_show_at_80_columns_and_wide(world):
    cfg = str(world.config)
    r = spotwise("status", "-c", cfg)
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    pending = next(x for x in r.stdout.splitlines() if world.ids["pending"] in x)
    reason = pending[r.stdout.splitlines()[0].index("REASON") :]
    assert _cut_at_a_word(reason, LONG_REASON), reason
    wide = spotwise("status", "-o", "wide", "-c", cfg).stdout.splitlines()
    assert wide[0].split()[:2] == ["ID", "NAME"]  # -o wide keeps NAME
    assert any(LONG_NAME in x and LONG_REASON in x for x in wide)
    r = spotwise("show", world.ids["running"], "-c", cfg)
    assert r.returncode == 0, r.stderr
    events = r.stdout[r.stdout.index("\nevents\n") :].splitlines()[2:]
    assert events and all(len(x) <= 80 for x in events)
    doc = spotwise("events", "--job", world.ids["running"], "-c", cfg, "-o", "json").stdout
    assert len(events) == 1 + len(json.loads(doc)["events"]) >= 8  # a header, one line each


def _local_world(tmp: Path, speedup: float):
    """An ops world on a sped-up local market whose clock started a minute ago."""
    from providers.local.state import ensure_epoch
    from scheduler.core.config import local_settings
    from scheduler.state.files import load_config

    w = make_ops_world(tmp)
    w.config.write_text(w.config.read_text().replace("speedup = 1", f"speedup = {speedup:g}"))
    real_now = datetime.now(UTC)
    anchor = real_now - timedelta(minutes=1)
    ensure_epoch(local_settings(load_config(w.config)).resolved_state_dir(), anchor)
    return w, ScaledClock(anchor, speedup), real_now


@pytest.mark.slow
def test_one_clock_on_a_sped_up_local_market(tmp_path: Path):
    """Submitted 20 real seconds ago reads 20s, not 40m; a job that finished two real
    minutes ago is still listed; show, events and logs print the same wall-clock moment."""
    w, market, real_now = _local_world(tmp_path, 120)
    created = market.anchor + (real_now - timedelta(seconds=20) - market.anchor) * 120
    finished = market.anchor + (real_now - timedelta(seconds=50) - market.anchor) * 120
    with Session(w.engine) as s:  # type: ignore[arg-type]
        job = s.get(Job, w.ids["pending"])
        assert job is not None
        job.created_at = created
        done = s.get(Job, w.ids["done"])
        assert done is not None
        done.updated_at = finished
        s.add_all([job, done])
        emit(s, created, "note", "the moment", job_id=w.ids["pending"])
        s.commit()
    cfg = str(w.config)
    r = spotwise("status", "-o", "wide", "-c", cfg)
    assert r.returncode == 0, r.stderr
    row = next(x for x in r.stdout.splitlines() if w.ids["pending"] in x).split()
    age = row[row.index("PENDING") + 1]
    assert re.fullmatch(r"(1\d|2\d|3\d)s", age), age  # wall-clock seconds, not 40m
    assert w.ids["done"] in r.stdout  # finished under an hour ago on the wall clock
    wall = (real_now - timedelta(seconds=20)).strftime("%H:%M")
    events = spotwise("events", "--job", w.ids["pending"], "-c", cfg).stdout
    assert f" {wall}:" in next(x for x in events.splitlines() if "the moment" in x)
    show = spotwise("show", w.ids["pending"], "-c", cfg).stdout
    assert re.search(rf"created \d{{4}}-\d\d-\d\d {wall}:\d\d UTC", show), show
    assert "local market at 120x: times are wall-clock" in show


@pytest.mark.slow
def test_a_gangs_price_per_hour_is_the_gangs(tmp_path: Path):
    w = make_ops_world(tmp_path)
    with Session(w.engine) as s:  # type: ignore[arg-type]
        a = s.get(Attempt, f"{w.ids['running']}-a1")
        assert a is not None
        a.nodes, a.price_per_hour = 4, 1.25
        s.add(a)
        s.commit()
    r = spotwise("status", "-o", "wide", "-c", str(w.config))
    row = next(x for x in r.stdout.splitlines() if w.ids["running"] in x)
    assert "$5.00" in row.split() and "$1.25" not in row.split()
    show = spotwise("show", w.ids["running"], "-c", str(w.config)).stdout
    assert "$5.00/h (4 x $1.25)" in show


def test_money_has_no_negative_zero_and_tiny_amounts_no_percentage():
    from scheduler.state.report import Row

    assert money(-0.001) == "$0.00" and money(-0.0) == "$0.00" and money(-0.4) == "-$0.40"
    tiny = Row("x", cost_usd=0.004, ondemand_usd=0.02)
    assert tiny.savings_usd == pytest.approx(0.016) and tiny.savings_pct is None
    assert Row("y", cost_usd=1.0, ondemand_usd=2.0).savings_pct == 50.0


def test_a_watcher_keeps_its_first_columns(tmp_path: Path):
    from scheduler.cli import status as status_cli
    from scheduler.state import read_models

    w = make_ops_world(tmp_path)
    rows = read_models.job_rows(w.engine)
    now = datetime.now(UTC)
    first = status_cli.status_layout([status_cli._status_cells(r, now) for r in rows], 120)
    for r in rows:  # the next frame's reasons are short: more columns would fit
        r["reason"] = "ok"
    cells = [status_cli._status_cells(r, now) for r in rows]
    assert status_cli.status_layout(cells, 120).names != first.names  # would change
    assert status_cli.status_layout(cells, 120, keep=first.names).names == first.names


def test_screen_clock_is_the_inverse_of_the_markets():
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    screen = ScreenClock(ScaledClock(anchor, 60))
    wall = anchor + timedelta(seconds=30)
    assert screen.daemon_time(wall) == anchor + timedelta(minutes=30)
    assert screen.wall(anchor + timedelta(minutes=30)) == wall
    assert ScreenClock(object()).wall(wall) == wall and ScreenClock(object()).note() == ""
