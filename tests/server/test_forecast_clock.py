"""When a budget reaches its limit, said on the wall clock: on a sped-up local market the
daemon's clock runs ahead, and `budget` (against the database and through the server) and
the dashboard's budgets page all give the wall-clock moment, as every other time they show."""

from __future__ import annotations

import re
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from sqlmodel import Session

from providers.local.state import ensure_epoch
from scheduler.core.config import local_settings
from scheduler.state.files import load_config
from scheduler.state.lease import DaemonRecord
from scheduler.state.models import BudgetSpend
from tests.support.api_server import running_server, token_for
from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow

SPEEDUP = 120
BUDGET = """
[[budgets]]
name = "research"
scope = "team:research"
limit_usd = 500
window = "total"
"""


def _limit_at(table: str) -> str:
    row = next(line for line in table.splitlines() if line.startswith("research"))
    found = re.search(r"\d\d-\d\d (\d\d:\d\d):\d\d", row)
    assert found, row
    return found.group(1)


def test_the_limit_is_forecast_on_the_wall_clock(tmp_path: Path) -> None:
    w = make_ops_world(tmp_path)
    w.config.write_text(
        w.config.read_text().replace("speedup = 1", f"speedup = {SPEEDUP}") + BUDGET
    )
    real_now = datetime.now(UTC)
    anchor = real_now - timedelta(minutes=1)  # the market is two hours ahead: 1 min x 120
    ensure_epoch(local_settings(load_config(w.config)).resolved_state_dir(), anchor)
    with Session(w.engine) as s:  # type: ignore[arg-type]
        # $400 left at $400 per market hour: one market hour, 30 wall-clock seconds.
        s.add(
            BudgetSpend(
                name="research", scope="team:research", window="total", limit_usd=500,
                hard=True, spent_usd=100.0, burn_per_hour=400.0, updated_at=real_now,
            )
        )  # fmt: skip
        s.commit()
    DaemonRecord(w.engine, timedelta(minutes=1)).beat("ok")  # type: ignore[arg-type]
    wall = {
        (real_now + timedelta(seconds=30 + d)).strftime("%H:%M") for d in (-5, 0, 60)
    }  # the command runs some seconds after real_now
    local = spotwise("budget", "-c", str(w.config), COLUMNS="200")
    assert local.returncode == 0, local.stderr
    assert _limit_at(local.stdout) in wall, (local.stdout, wall)
    token = token_for(w.engine, "alice", "member", ("research",))
    with running_server(w.config, tmp_path) as server:
        remote = spotwise("budget", SPOTWISE_API=server.url, SPOTWISE_TOKEN=token, COLUMNS="200")
        assert remote.returncode == 0, remote.stderr
        assert _limit_at(remote.stdout) in wall, remote.stdout
        login = urllib.request.Request(
            server.url + "/ui/login", data=urlencode({"token": token}).encode(), method="POST"
        )
        with urllib.request.urlopen(login, timeout=30) as r:
            cookie = r.headers["Set-Cookie"].split(";", 1)[0]
        page = urllib.request.Request(server.url + "/ui/budgets", headers={"Cookie": cookie})
        with urllib.request.urlopen(page, timeout=30) as r:
            html = r.read().decode()
    shown = re.search(r"[A-Z][a-z]{2} \d\d (\d\d:\d\d)Z", html)
    assert shown and shown.group(1) in wall, html[-3000:]
