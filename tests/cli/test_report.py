"""`spotwise report` (spend vs the cheapest adequate on-demand, savings,
interruptions, GPU-hours; HTML with plots) and `budget`'s PROJECTED to the window's end."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from providers.local.snapshot import load_catalog
from scheduler.cli import app as cli
from scheduler.core.budget import BudgetRule, Window, window_end
from scheduler.core.jobspec import jobspec_from_dict
from scheduler.core.states import AttemptEnd, AttemptState
from scheduler.state import read_models
from scheduler.state.desired import submit
from scheduler.state.models import Attempt, BudgetSpend, PriceSample, SpendBucket
from scheduler.state.report import (
    BucketFact,
    Facts,
    ReportWindow,
    budget_series,
    report_window,
)
from tests.support.ops_world import make_ops_world

runner = CliRunner()
H = timedelta(hours=1)
BUDGETS = """
[[budgets]]
name = "research"
scope = "team:research"
limit_usd = 500
window = "month"

[[budgets]]
name = "ml"
scope = "team:ml"
limit_usd = 100
window = "month"

[[budgets]]
name = "company"
scope = "global"
limit_usd = 5000
window = "month"
hard = false
"""


def _ondemand(gpu: str | None) -> float:
    """The cheapest 1-GPU on-demand list price in the local market's catalog."""
    return min(r.price for r in load_catalog() if r.gpu_count == 1 and gpu in (None, r.gpu_model))


def _attempt(job_id: str, n: int, cloud: str, zone: str, market: str, start, end, **kw):
    return Attempt(
        id=f"{job_id}-a{n}",
        job_id=job_id,
        number=n,
        token=secrets.token_hex(8),
        provider="local",
        cloud=cloud,
        region=zone[:-1],
        zone=zone,
        instance_type="p3.2xlarge",
        market=market,
        pool=f"{cloud}/{zone}/p3.2xlarge/{market}",
        price_per_hour=1.0,
        state=AttemptState.ENDED,
        instance_id=f"local-{job_id}-{n}",
        created_at=start,
        started_at=start,
        ended_at=end,
        accrued_until=end,
        **kw,
    )


@pytest.fixture
def world(tmp_path: Path):
    """The ops world, with times fixed to whole hours ending an hour ago (so no figure depends
    on the minute the test runs at) plus a V100 job of team nlp (no budget) interrupted once."""
    w = make_ops_world(tmp_path)
    w.config.write_text(w.config.read_text() + BUDGETS)
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 6 * H
    spec = jobspec_from_dict(
        {
            "name": "v100-train",
            "team": "nlp",
            "command": ["train"],
            "gpus": "V100:1",
            "checkpoint_interval": "30m",
        }
    )
    v100 = submit(w.engine, spec, t0 - H, (tmp_path / "ck2").as_uri()).id
    w.ids["v100"] = v100
    ids = w.ids
    with Session(w.engine) as s:  # type: ignore[arg-type]
        run = s.get(Attempt, f"{ids['running']}-a1")
        failed = s.get(Attempt, f"{ids['failed']}-a1")
        assert run is not None and failed is not None
        run.started_at, run.accrued_until, run.gpu_count = t0 + 2 * H, t0 + 5 * H, 1
        failed.started_at, failed.ended_at = t0 + H, t0 + 1.5 * H
        failed.accrued_until = failed.ended_at
        s.add_all([run, failed])
        interrupted = {"end_reason": AttemptEnd.INTERRUPTED}
        s.add(_attempt(ids["done"], 1, "aws", "us-east-1c", "spot", t0, t0 + H, **interrupted))
        s.add(_attempt(v100, 1, "azure", "eastusa", "spot", t0, t0 + 2 * H, **interrupted))
        s.add(
            _attempt(
                v100, 2, "gcp", "us-central1a", "spot", t0 + 2 * H, t0 + 4 * H,
                end_reason=AttemptEnd.FINISHED,
            )
        )  # fmt: skip
        spend = [  # (hour, attempt, job key, team, cloud, usd)
            (t0, f"{ids['done']}-a1", "done", "research", "aws", 1.2),
            (t0 + H, f"{ids['failed']}-a1", "failed", "research", "aws", 0.25),
            *[(t0 + k * H, f"{ids['running']}-a1", "running", "vision", "aws", 0.9)
              for k in (2, 3, 4)],
            (t0, f"{v100}-a1", "v100", "nlp", "azure", 1.0),
            (t0 + H, f"{v100}-a1", "v100", "nlp", "azure", 1.0),
            (t0 + 2 * H, f"{v100}-a2", "v100", "nlp", "gcp", 0.8),
            (t0 + 3 * H, f"{v100}-a2", "v100", "nlp", "gcp", 0.8),
            (t0 - 40 * 24 * H, f"{ids['done']}-a0", "done", "research", "aws", 100.0),
        ]  # fmt: skip
        for hour, attempt, key, team, cloud, usd in spend:
            s.add(
                SpendBucket(
                    hour=hour,
                    attempt_id=attempt,
                    job_id=ids[key],
                    job_name=key,
                    team=team,
                    cloud=cloud,
                    usd=usd,
                )
            )
        for k, price in enumerate((0.9, 1.3, 0.7, 1.1)):  # spot history of a pool used
            s.add(
                PriceSample(
                    observed_at=t0 - H + k * 1.5 * H,
                    cloud="aws",
                    region="us-east-1",
                    zone="us-east-1a",
                    instance_type="p3.2xlarge",
                    market="spot",
                    price_per_hour=price,
                    pool="aws/us-east-1a/p3.2xlarge/spot",
                )
            )
        s.commit()
    w.t0 = t0  # type: ignore[attr-defined]
    return w


def _report(w, *args: str) -> dict:
    r = runner.invoke(cli.app, ["report", *args, "-o", "json", "-c", str(w.config)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_report_by_team_exact_figures(world):
    doc = _report(world)
    assert doc["version"] == read_models.JSON_VERSION and doc["by"] == "team"
    t4, v100 = _ondemand(None), _ondemand("V100")  # "any:1" jobs and the V100:1 job
    rows = {r["team"]: r for r in doc["rows"]}
    assert [r["team"] for r in doc["rows"]] == ["nlp", "vision", "research", "ml"]
    nlp, vision, research, ml = rows["nlp"], rows["vision"], rows["research"], rows["ml"]
    # nlp: 2 h interrupted (last 30 min checkpoint interval lost) + 2 h finished; no budget.
    assert nlp["budgets"] == [] and nlp["cost_usd"] == 3.6 and nlp["interruptions"] == 1
    assert (nlp["hours"], nlp["lost_hours"], nlp["useful_hours"]) == (4.0, 0.5, 3.5)
    assert nlp["ondemand_usd"] == pytest.approx(3.5 * v100, abs=1e-6)
    assert nlp["savings_usd"] == pytest.approx(3.5 * v100 - 3.6, abs=1e-6)
    assert nlp["savings_pct"] == round(100 * (3.5 * v100 - 3.6) / (3.5 * v100), 2)
    assert nlp["gpu_hours"] == 4.0 and nlp["jobs"] == 1
    # research: 1 h interrupted (default 10 min interval lost) + a failed half hour: failed
    # work saved nothing, so it has no on-demand equivalent (its cost still counts).
    assert research["budgets"] == ["research"] and research["cost_usd"] == 1.45
    assert research["hours"] == 1.5 and research["lost_hours"] == pytest.approx(1 / 6, abs=1e-6)
    assert research["ondemand_usd"] == pytest.approx((1 - 1 / 6) * t4, abs=1e-6)
    assert research["interruptions"] == 1 and research["jobs"] == 2
    # vision: 3 h running so far, paid to the last accrual.
    assert (vision["cost_usd"], vision["hours"], vision["gpu_hours"]) == (2.7, 3.0, 3.0)
    assert vision["savings_usd"] == pytest.approx(3 * t4 - 2.7, abs=1e-6)
    # A team with a budget and nothing spent is listed too.
    assert ml["budgets"] == ["ml"] and ml["cost_usd"] == 0 and ml["hours"] == 0
    total = doc["total"]
    assert total["cost_usd"] == 7.75 and total["interruptions"] == 2 and total["jobs"] == 4
    od = 3.5 * v100 + (1 - 1 / 6 + 3) * t4
    assert total["ondemand_usd"] == pytest.approx(od, abs=1e-6)
    assert total["savings_usd"] == pytest.approx(od - 7.75, abs=1e-6)
    basis = {b["name"]: b for b in doc["ondemand_basis"]}
    assert basis["v100-train"]["price_per_hour"] == v100
    assert basis["v100-train"]["pool"].endswith("/on-demand")
    assert any("checkpoint_interval" in n for n in doc["notes"])
    assert any("at report time" in n for n in doc["notes"])


def test_report_by_job_and_cloud_and_all_time(world):
    ids = world.ids
    by_job = {r["job"]: r for r in _report(world, "--by", "job")["rows"]}
    v = by_job[ids["v100"]]
    assert (v["name"], v["team"], v["cost_usd"], v["hours"]) == ("v100-train", "nlp", 3.6, 4.0)
    assert by_job[ids["done"]]["interruptions"] == 1 and by_job[ids["done"]]["hours"] == 1.0
    assert ids["pending"] not in by_job  # nothing ran, nothing paid
    clouds = {r["cloud"]: r for r in _report(world, "--by", "cloud")["rows"]}
    assert {c: r["cost_usd"] for c, r in clouds.items()} == {"aws": 4.15, "azure": 2.0, "gcp": 1.6}
    assert (clouds["azure"]["interruptions"], clouds["azure"]["lost_hours"]) == (1, 0.5)
    assert clouds["aws"]["hours"] == 4.5 and clouds["gcp"]["lost_hours"] == 0
    all_time = _report(world, "--since", "")
    assert all_time["total"]["cost_usd"] == 107.75 and all_time["window"]["start"] is None


@pytest.mark.slow
def test_report_until_clips_hours_and_spend(world):
    until = (world.t0 + 2 * H).isoformat()
    doc = _report(world, "--since", "", "--until", until, "--by", "cloud")
    clouds = {r["cloud"]: r for r in doc["rows"]}
    # aws: the interrupted hour and the failed half hour; the running attempt starts later.
    assert (clouds["aws"]["hours"], clouds["aws"]["cost_usd"]) == (1.5, 101.45)
    assert clouds["azure"]["interruptions"] == 1 and "gcp" not in clouds


def test_report_bad_since_is_one_line_exit_2(world, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["spotwise", "report", "--since", "last tuesday",
                                      "-c", str(world.config)])  # fmt: skip
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "last tuesday" in lines[0] and lines[0].startswith("error:")


def test_report_table_says_how_it_counts(world):
    r = runner.invoke(cli.app, ["report", "-c", str(world.config)])
    assert r.exit_code == 0, r.output
    assert "nlp" in r.stdout and "$7.75" in r.stdout and "none" in r.stdout
    assert "checkpoint_interval" in r.stdout


def test_budget_series_resets_at_the_window_start():
    """Spend against a monthly budget starts from what the month had spent before the report
    window, and drops to zero when the next month starts."""
    t = datetime(2026, 3, 31, 22, tzinfo=UTC)
    rule = BudgetRule("r", "team:research", 10.0, Window.MONTH)
    facts = Facts(window=ReportWindow(t, t + 4 * H), now=t + 4 * H)
    facts.buckets = [
        BucketFact(t + k * H, "a", "j", "x", team, "aws", usd)
        for k, team, usd in ((0, "research", 1.0), (1, "other", 5.0), (2, "research", 2.0))
    ]
    facts.before = {Window.MONTH: {("x", "research"): 3.0, ("y", "other"): 9.0}}
    pts = budget_series(rule, facts).points
    assert pts[0] == (t, 3.0) and (t + H, 4.0) in pts
    april = datetime(2026, 4, 1, tzinfo=UTC)
    assert (april, 4.0) in pts and (april, 0.0) in pts
    assert pts[-1] == (t + 4 * H, 2.0)


def test_report_window_matches_the_ledger_grain():
    now = datetime(2026, 5, 2, 12, 40, tzinfo=UTC)
    w = report_window(now - timedelta(days=1), None, now)
    assert w.start == datetime(2026, 5, 1, 12, tzinfo=UTC) and w.end == now
    w = report_window(None, datetime(2026, 5, 2, 9, 15, tzinfo=UTC), now)
    assert w.start is None and w.end == datetime(2026, 5, 2, 10, tzinfo=UTC)


# -- budget PROJECTED ----------------------------------------------------------------------
def test_window_end():
    assert window_end(Window.DAY, datetime(2026, 2, 28, 5, tzinfo=UTC)) == datetime(
        2026, 3, 1, tzinfo=UTC
    )
    assert window_end(Window.WEEK, datetime(2026, 5, 6, tzinfo=UTC)) == datetime(
        2026, 5, 11, tzinfo=UTC
    )  # Wednesday -> next Monday
    assert window_end(Window.MONTH, datetime(2026, 12, 31, 23, tzinfo=UTC)) == datetime(
        2027, 1, 1, tzinfo=UTC
    )
    assert window_end(Window.TOTAL, datetime(2026, 1, 1, tzinfo=UTC)) is None


@pytest.mark.slow
def test_budget_projected_to_the_end_of_the_window(tmp_path):
    w = make_ops_world(tmp_path)
    w.config.write_text(
        w.config.read_text()
        + '\n[[budgets]]\nname = "d"\nscope = "global"\nlimit_usd = 100\nwindow = "day"\n'
        + '\n[[budgets]]\nname = "t"\nscope = "global"\nlimit_usd = 100\nwindow = "total"\n'
    )
    now = datetime.now(UTC)
    with Session(w.engine) as s:  # type: ignore[arg-type]
        for name, window in (("d", "day"), ("t", "total")):
            s.add(
                BudgetSpend(
                    name=name, scope="global", window=window, limit_usd=100, hard=True,
                    spent_usd=10.0, burn_per_hour=2.0, updated_at=now,
                )
            )  # fmt: skip
        s.commit()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    left_before = (midnight - datetime.now(UTC)).total_seconds() / 3600
    r = runner.invoke(cli.app, ["budget", "-o", "json", "-c", str(w.config)])
    left_after = (midnight - datetime.now(UTC)).total_seconds() / 3600
    assert r.exit_code == 0, r.output
    rows = {b["name"]: b for b in json.loads(r.stdout)["budgets"]}
    d = rows["d"]
    assert d["projected_to"] == midnight.isoformat().replace("+00:00", "Z")
    assert 10 + 2 * left_after - 1e-6 <= d["projected_usd"] <= 10 + 2 * left_before + 1e-6
    assert rows["t"]["projected_usd"] is None and rows["t"]["projected_to"] is None
    table = runner.invoke(cli.app, ["budget", "-c", str(w.config)])
    assert "PROJECTED" in table.stdout and "at the window's end" in table.stderr


# -- HTML ------------------------------------------------------------------------------------
def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_html_report_is_self_contained_and_its_plots_render(world, tmp_path):
    page = tmp_path / "report.html"
    r = runner.invoke(
        cli.app, ["report", "--html", str(page), "-o", "json", "-c", str(world.config)]
    )
    assert r.exit_code == 0, r.output
    text = page.read_text()
    for fid in ("plot-budgets", "plot-prices", "plot-timeline"):
        assert f'<figure id="{fid}"><svg' in text
    assert "<script" not in text and " src=" not in text and "<link" not in text
    hrefs = [p.split('"', 1)[0] for p in text.split('href="')[1:]]
    # The SVGs' own glyphs, and links (never loaded) to each job's checkpoint store.
    assert hrefs and all(h.startswith(("#", "file:///", "https://")) for h in hrefs)
    assert any(h.startswith("file:///") for h in hrefs)
    assert "research limit $500/month (hard)" in text  # the legend (matplotlib notes text)
    assert "aws/us-east-1a/p3.2xlarge/spot" in text and "checkpoint_interval" in text

    exe = _chromium()
    if exe is None:
        if os.environ.get("SPOTWISE_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (SPOTWISE_REQUIRE_BROWSER=1, as in CI)")
        pytest.skip("chromium is not installed: apt-get install chromium to run this check")
    shot = tmp_path / "report.png"
    proc = subprocess.run(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1280,2600", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.is_file(), proc.stderr[-2000:]
    keep = os.environ.get("SPOTWISE_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    import numpy as np
    from PIL import Image

    from scheduler.cli.report_html import INTERRUPTION, PRICES, SERIES, SPOT

    px = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(np.int16)
    packed = (px[:, 0].astype(np.int32) << 16) | (px[:, 1].astype(np.int32) << 8) | px[:, 2]
    assert len(np.unique(packed)) > 200, "the screenshot is (nearly) blank"

    def near(hex_colour: str) -> int:
        want = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
        return int((np.abs(px - want).max(axis=1) < 16).sum())

    # Each plot's own ink, in colours the page's text and tables never use: the first
    # budget's line, the price line, the timeline's spot bars and its interruption markers.
    assert near(SERIES[0]) > 300, "the budget plot did not render"
    assert near(PRICES[0]) > 300, "the price plot did not render"
    assert near(SPOT) > 1000, "the timeline's bars did not render"
    assert near(INTERRUPTION) > 100, "the interruption markers did not render"


def test_report_table_fits_80_columns_and_never_shortens_an_id(world, monkeypatch):
    """At 80 columns lower-value figures are dropped, as in `status`; every job id stays
    whole (copyable) and no line is wider than the terminal."""
    monkeypatch.setenv("COLUMNS", "80")
    r = runner.invoke(cli.app, ["report", "-c", str(world.config), "--by", "job"])
    assert r.exit_code == 0, r.output
    table = r.stdout.split("\n* ")[0]
    assert max(len(line) for line in table.splitlines()) <= 80, table
    rows = _report(world, "--by", "job")["rows"]
    assert rows and all(row["job"] in table for row in rows)
    assert "COST" in table and "…" not in table


def test_report_plots_each_pools_predicted_against_observed_rate(world, tmp_path):
    """Calibration: a pool scored by its cloud and one on the configured prior, each with
    the rate it then showed; a pool with under an hour of exposure is left out."""
    from scheduler.state.models import PoolState

    with Session(world.engine) as s:  # type: ignore[arg-type]
        scored = PoolState(
            pool="aws/us-east-1a/p3.2xlarge/spot",
            interruptions=3,
            exposure_hours=20.0,
            prior_rate=0.2,
            prior_source="aws score 3",
        )
        s.add(scored)
        s.add(PoolState(pool="gcp/us-central1-a/a2-highgpu-1g/spot", exposure_hours=12.0))
        s.add(PoolState(pool="azure/eastus-1/NC6/spot", interruptions=1, exposure_hours=0.5))
        s.commit()
    page = tmp_path / "report.html"
    r = runner.invoke(
        cli.app, ["report", "--html", str(page), "-o", "json", "-c", str(world.config)]
    )
    assert r.exit_code == 0, r.output
    got = {c["pool"]: c for c in json.loads(r.stdout)["calibration"]}
    assert set(got) == {"aws/us-east-1a/p3.2xlarge/spot", "gcp/us-central1-a/a2-highgpu-1g/spot"}
    aws = got["aws/us-east-1a/p3.2xlarge/spot"]
    assert aws["predicted_per_hour"] == 0.2 and aws["observed_per_hour"] == pytest.approx(0.15)
    assert aws["predicted_from"] == "aws score 3"
    gcp = got["gcp/us-central1-a/a2-highgpu-1g/spot"]
    assert gcp["predicted_from"] == "config prior" and gcp["observed_per_hour"] == 0
    text = page.read_text()
    assert '<figure id="plot-calibration"><svg' in text
    assert "predicted interruptions per hour" in text and "us-east-1a" in text
