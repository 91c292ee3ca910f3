"""The cost report, from the same hourly buckets the budgets sum."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from scheduler.cli import app as cli
from scheduler.cli import spend as spend_cli
from scheduler.core.errors import UserError
from scheduler.state import read_models
from scheduler.state.models import SpendBucket
from tests.support.ops_world import make_ops_world

runner = CliRunner()


@pytest.fixture
def world(tmp_path: Path):
    w = make_ops_world(tmp_path)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    spend = [  # (hours ago, job key, team, cloud, usd)
        (1, "running", "vision", "aws", 2.0),
        (2, "running", "vision", "aws", 1.5),
        (3, "failed", "research", "gcp", 0.25),
        (24 * 40, "done", "research", "aws", 100.0),  # outside the default 30 days
    ]
    with Session(w.engine) as s:  # type: ignore[arg-type]
        for ago, key, team, cloud, usd in spend:
            s.add(
                SpendBucket(
                    hour=hour - timedelta(hours=ago),
                    attempt_id=f"{w.ids[key]}-a1",
                    job_id=w.ids[key],
                    job_name=key,
                    team=team,
                    cloud=cloud,
                    usd=usd,
                )
            )
        s.commit()
    return w


def _json(w, *args: str) -> dict:
    r = runner.invoke(cli.app, ["cost", *args, "-o", "json", "-c", str(w.config)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_cost_by_team_over_the_last_30_days(world):
    doc = _json(world)
    assert doc["version"] == read_models.JSON_VERSION and doc["by"] == "team"
    assert [(r["team"], r["cost_usd"], r["jobs"]) for r in doc["costs"]] == [
        ("vision", 3.5, 1),
        ("research", 0.25, 1),
    ]
    assert doc["total_usd"] == 3.75


def test_cost_by_job_cloud_and_day_and_all_time(world):
    by_job = _json(world, "--by", "job", "--since", "")
    assert by_job["costs"][0]["job"] == world.ids["done"] and by_job["total_usd"] == 103.75
    assert by_job["costs"][0]["name"] == "done"
    clouds = {r["cloud"]: r["cost_usd"] for r in _json(world, "--by", "cloud")["costs"]}
    assert clouds == {"aws": 3.5, "gcp": 0.25}
    days = [r["day"] for r in _json(world, "--by", "day", "--since", "60d")["costs"]]
    assert days == sorted(days) and len(days) >= 2


def test_cost_window_bounds_and_table(world):
    # From the start of the bucket an hour back: that bucket only (a relative "--since"
    # would make the answer depend on the minute the test runs at).
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    since = (hour - timedelta(hours=1)).isoformat()
    assert _json(world, "--since", since)["total_usd"] == 2.0
    r = runner.invoke(cli.app, ["cost", "-c", str(world.config)])
    assert r.exit_code == 0 and "vision" in r.stdout and "$3.75" in r.stdout
    with pytest.raises(UserError, match="neither a duration"):
        spend_cli.parse_since("last tuesday", datetime.now(UTC))
    assert spend_cli.parse_since("2026-01-01T00:00:00", datetime.now(UTC)) == datetime(
        2026, 1, 1, tzinfo=UTC
    )
