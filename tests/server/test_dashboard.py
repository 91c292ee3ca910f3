"""The dashboard as a person sees it: pages with the database's real jobs, budgets, prices
and report, only of the reader's teams, with nothing fetched from elsewhere and a refresh
of their own; rendered by headless Chromium (Debian's) at 1280 px and at a phone's width,
and the screenshots are not blank."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.support.api_server import running_server, token_for
from tests.support.ops_world import LONG_NAME, make_ops_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("dash")
    world = make_ops_world(tmp)
    world.config.write_text(
        world.config.read_text()
        + '\n[[budgets]]\nname = "vision"\nscope = "team:vision"\nlimit_usd = 50\n'
    )
    tokens = {
        "bob": token_for(world.engine, "bob", "member", ("vision",)),
        "alice": token_for(world.engine, "alice", "member", ("research",)),
    }
    with running_server(world.config, tmp) as server:
        yield world, server, tokens, tmp


def _cookie(server, token: str) -> str:
    req = urllib.request.Request(
        server.url + "/ui/login", data=urlencode({"token": token}).encode(), method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    return cookie.split(";", 1)[0]


def _page(server, path: str, cookie: str | None) -> tuple[int, str]:
    headers = {"Cookie": cookie} if cookie else {}
    req = urllib.request.Request(server.url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_pages_show_real_data_of_the_readers_teams_only(site) -> None:
    world, server, tokens, _tmp = site
    bob = _cookie(server, tokens["bob"])
    status, jobs = _page(server, "/ui/jobs", bob)
    assert status == 200
    assert "train-v100" in jobs and LONG_NAME in jobs and "RUNNING" in jobs
    for other in ("crashes", "over-budget", "old-finished", world.ids["held"]):
        assert other not in jobs  # research's
    assert "[bold]not markup[/bold]" in jobs  # the reason, escaped, as written
    assert _page(server, f"/ui/jobs/{world.ids['held']}", bob)[0] == 404
    status, job = _page(server, f"/ui/jobs/{world.ids['running']}", bob)
    assert status == 200 and "aws/us-east-1a/p3.2xlarge/spot" in job and 'class="lane"' in job
    status, budgets = _page(server, "/ui/budgets", bob)
    assert status == 200 and "team:vision" in budgets and "$50.00" in budgets
    status, prices = _page(server, "/ui/prices?gpu=V100", bob)
    assert status == 200 and "p3.2xlarge" in prices
    assert _page(server, "/ui/report?by=job", bob)[0] == 200
    alice = _cookie(server, tokens["alice"])
    assert "crashes" in _page(server, "/ui/jobs", alice)[1]
    for page in (jobs, job, budgets, prices):
        assert '<meta http-equiv="refresh"' in page
        assert "<script" not in page and " src=" not in page and "<link" not in page
        assert "http://" not in page and "https://" not in page
    status, login = _page(server, "/ui/jobs", None)
    assert status == 401 and 'name="token"' in login and "train-v100" not in login
    assert _page(server, "/ui/jobs", "spotwise_token=swt_0000000000_" + "x" * 43)[0] == 401


def test_filters_the_timeline_and_env_values(site) -> None:
    from scheduler.core.jobspec import jobspec_from_dict
    from scheduler.state.desired import submit

    world, server, tokens, tmp = site
    alice = _cookie(server, tokens["alice"])
    held = _page(server, "/ui/jobs?team=research&state=held", alice)[1]
    assert world.ids["held"] in held and world.ids["failed"] not in held
    assert world.ids["done"] not in held and "<option selected>HELD</option>" in held
    # Asking for another team's jobs by the filter shows none of them.
    assert "no jobs" in _page(server, "/ui/jobs?team=vision", alice)[1]
    # Where the failed attempt ran and why it ended, on its timeline.
    status, crashed = _page(server, f"/ui/jobs/{world.ids['failed']}", alice)
    assert status == 200 and "ended-bad" in crashed and "failed (exit 1)" in crashed
    # Env values: to the job's team; an admin of no team sees the names only.
    spec = jobspec_from_dict(
        {"name": "with-env", "team": "vision", "command": ["train"], "env": {"KEY": "v-77"}}
    )
    job = submit(world.engine, spec, datetime.now(UTC), (tmp / "ck2").as_uri(), "bob")
    admin = _cookie(server, token_for(world.engine, "root", "admin"))
    assert "KEY=v-77" in _page(server, f"/ui/jobs/{job.id}", _cookie(server, tokens["bob"]))[1]
    seen = _page(server, f"/ui/jobs/{job.id}", admin)[1]
    assert "v-77" not in seen and "KEY (values shown to team vision)" in seen


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.parametrize(("width", "height", "page"), [(1280, 900, "jobs"), (390, 844, "job")])
def test_chromium_renders_the_pages_at_1280_px_and_on_a_phone(site, width, height, page) -> None:
    world, server, tokens, tmp = site
    exe = _chromium()
    if exe is None:
        if os.environ.get("SPOTWISE_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (SPOTWISE_REQUIRE_BROWSER=1, as in CI)")
        pytest.skip("chromium is not installed: apt-get install chromium to run this check")
    after = "/ui/jobs" if page == "jobs" else f"/ui/jobs/{world.ids['running']}"
    # Signing in as a person does: the login form, posted by the browser, sets the cookie.
    form = tmp / f"login-{width}.html"
    form.write_text(
        f'<!doctype html><form id=f method=post action="{server.url}/ui/login">'
        f'<input name=token value="{tokens["bob"]}"><input name=next value="{after}"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    shot = tmp / f"dashboard-{width}.png"
    proc = subprocess.run(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp / f'profile-{width}'}", f"--screenshot={shot}",
         f"--window-size={width},{height}", "--virtual-time-budget=8000", form.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.is_file(), proc.stderr[-2000:]
    keep = os.environ.get("SPOTWISE_DASHBOARD_SCREENSHOT")
    if keep:
        shutil.copy(shot, Path(keep).with_name(f"{Path(keep).stem}-{width}.png"))
    import numpy as np
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (width, height)
    px = np.asarray(img).reshape(-1, 3).astype(np.int16)
    packed = (px[:, 0].astype(np.int32) << 16) | (px[:, 1].astype(np.int32) << 8) | px[:, 2]
    assert len(np.unique(packed)) > 100, "the screenshot is (nearly) blank"

    def near(hex_colour: str) -> int:
        want = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
        return int((np.abs(px - want).max(axis=1) < 12).sum())

    assert near("#1f3a5f") > 20 * width, "the header did not render"  # signed in: the page
    assert near("#1a7f37") > 30, "the RUNNING job's state did not render"
    if page == "job":
        assert near("#2da44e") > 500, "the attempt's bar on the timeline did not render"
