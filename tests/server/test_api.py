"""The API server as a user's client meets it: the documents the CLI prints with -o json,
pagination and filters as `status` has them, an OpenAPI document, one clear line for bad
input, and who may do what (members act on their teams' jobs, viewers read, admins all;
every write records who asked)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, col, select

from scheduler.state.lease import DaemonRecord
from scheduler.state.models import Event, Job
from tests.support.api_server import running_server, token_for
from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow

JOB = """
name = "tiny"
team = "{team}"
command = ["python", "-c", "print(1)"]
gpus = "T4:1"
env = {{ WANDB_API_KEY = "k-123" }}
"""

BUDGETS = "".join(
    f'\n[[budgets]]\nname = "{name}"\nscope = "{scope}"\nlimit_usd = 1000\n'
    for name, scope in (
        ("all", "global"),
        ("research", "team:research"),
        ("vision", "team:vision"),
        ("bob-own", "user:bob"),
        ("alice-own", "user:alice"),
    )
)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("api")
    world = make_ops_world(tmp)
    world.config.write_text(world.config.read_text() + BUDGETS)
    tokens = {
        "admin": token_for(world.engine, "root-admin", "admin"),
        "alice": token_for(world.engine, "alice", "member", ("research",)),
        "bob": token_for(world.engine, "bob", "member", ("vision",)),
        "vera": token_for(world.engine, "vera", "viewer", ("vision",)),
    }
    with running_server(world.config, tmp) as server:
        yield world, server, tokens


def _beat(world) -> None:
    DaemonRecord(world.engine, timedelta(minutes=1)).beat("ok")


def test_status_is_the_document_the_cli_prints(api) -> None:
    world, server, tokens = api
    _beat(world)
    local = spotwise("status", "-o", "json", "-c", str(world.config))
    reply = server.get("/api/v1/jobs", tokens["admin"])
    assert local.returncode == 0, local.stderr
    assert reply.status == 200 and reply.headers["x-total-count"] == "5"
    assert reply.text == local.stdout  # byte for byte: one schema, one version field
    assert json.loads(reply.text)["version"] == 2


def test_pages_and_filters_as_status_has_them(api) -> None:
    _world, server, tokens = api
    first = server.get("/api/v1/jobs?limit=2", tokens["admin"])
    ids = [j["id"] for j in first.json()["jobs"]]
    assert len(ids) == 2 and first.headers["x-total-count"] == "5"
    link = first.headers["link"]
    assert link.startswith("</api/v1/jobs?") and link.endswith('>; rel="next"')
    second = server.get(link[1 : link.index(">")], tokens["admin"])
    assert next(j["id"] for j in second.json()["jobs"]) not in ids
    held = server.get("/api/v1/jobs?state=held,failed&team=research", tokens["admin"]).json()
    assert sorted(j["state"] for j in held["jobs"]) == ["FAILED", "HELD"]
    bad = server.get("/api/v1/jobs?state=sleeping", tokens["admin"])
    assert bad.status == 400
    assert bad.json()["error"].startswith("unknown state 'sleeping': use one of")
    worse = server.get("/api/v1/jobs?limit=0", tokens["admin"])
    assert worse.status == 422 and worse.json()["error"].startswith("query parameter 'limit'")
    assert "Traceback" not in worse.text


def test_openapi_names_every_operation(api) -> None:
    _world, server, _tokens = api
    doc = server.get("/api/v1/openapi.json").json()
    paths = set(doc["paths"])
    for path in ("/api/v1/jobs", "/api/v1/jobs/{ref}", "/api/v1/jobs/{ref}/cancel",
                 "/api/v1/jobs/{ref}/release", "/api/v1/jobs/{ref}/requeue",
                 "/api/v1/jobs/{ref}/logs", "/api/v1/events", "/api/v1/prices",
                 "/api/v1/budgets", "/api/v1/cost", "/api/v1/report"):  # fmt: skip
        assert path in paths, path
    assert server.get("/docs").status == 404  # its page would load scripts from a CDN


def test_members_see_and_act_on_their_teams_jobs_only(api) -> None:
    world, server, tokens = api
    mine = server.get("/api/v1/jobs", tokens["bob"]).json()["jobs"]
    assert {j["team"] for j in mine} == {"vision"}
    held = world.ids["held"]  # research's
    assert server.get(f"/api/v1/jobs/{held}", tokens["bob"]).status == 404
    assert server.get(f"/api/v1/jobs/{held}", tokens["alice"]).status == 200
    # A name resolves among the caller's jobs: another team's newer job is not found.
    assert server.get("/api/v1/jobs/over-budget", tokens["bob"]).status == 404


def test_submit_records_who_and_the_team_must_be_the_submitters(api, tmp_path: Path) -> None:
    world, server, tokens = api
    ok = server.post(
        "/api/v1/jobs", tokens["bob"], {"file": "tiny.toml", "text": JOB.format(team="vision")}
    )
    assert ok.status == 201, ok.text
    job_id = ok.json()["id"]
    with Session(world.engine) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.submitted_by == "bob" and job.team == "vision"
        events = s.exec(select(Event).where(Event.job_id == job_id)).all()
        assert [(e.kind, e.actor) for e in events] == [("submitted", "bob")]
    other = server.post(
        "/api/v1/jobs", tokens["bob"], {"file": "t.toml", "text": JOB.format(team="research")}
    )
    assert other.status == 403
    assert other.json()["error"].startswith("t.toml: team: 'research' is not one of bob's teams")
    viewer = server.post(
        "/api/v1/jobs", tokens["vera"], {"file": "t.toml", "text": JOB.format(team="vision")}
    )
    assert viewer.status == 403 and "viewers read" in viewer.json()["error"]
    broken = server.post("/api/v1/jobs", tokens["bob"], {"file": "t.toml", "text": "name = "})
    assert broken.status == 400 and broken.json()["error"].startswith("t.toml")
    # The env values: to the job's team, not to an admin of no team.
    assert server.get(f"/api/v1/jobs/{job_id}", tokens["vera"]).json()["spec"]["env"] == {
        "WANDB_API_KEY": "k-123"
    }
    assert server.get(f"/api/v1/jobs/{job_id}", tokens["admin"]).json()["spec"]["env"] == {
        "WANDB_API_KEY": "***"
    }
    # cancel: the viewer may not, the member may; the event names the member.
    assert server.post(f"/api/v1/jobs/{job_id}/cancel", tokens["vera"]).status == 403
    done = server.post(f"/api/v1/jobs/{job_id}/cancel", tokens["bob"])
    assert done.status == 200 and done.json()["id"] == job_id
    with Session(world.engine) as s:
        kinds = [(e.kind, e.actor) for e in s.exec(select(Event).where(Event.job_id == job_id))]
    assert ("cancel_requested", "bob") in kinds
    again = server.post(f"/api/v1/jobs/{job_id}/cancel", tokens["bob"])
    assert again.status == 200  # cancelling twice is harmless until the daemon acts


def test_requeue_and_release_by_the_teams_member(api) -> None:
    world, server, tokens = api
    failed, held = world.ids["failed"], world.ids["held"]
    wrong = server.post(f"/api/v1/jobs/{held}/requeue", tokens["alice"])
    assert wrong.status == 409 and "not FAILED" in wrong.json()["error"]
    assert (
        server.post(f"/api/v1/jobs/{failed}/requeue", tokens["alice"]).json()["state"] == "PENDING"
    )
    assert server.post(f"/api/v1/jobs/{held}/release", tokens["alice"]).json()["state"] == "PENDING"
    with Session(world.engine) as s:
        found = s.exec(select(Event).where(col(Event.kind).in_(("requeued", "released"))))
        actors = {e.kind: e.actor for e in found}
    assert actors == {"requeued": "alice", "released": "alice"}


def test_budgets_cost_report_and_events_are_scoped(api) -> None:
    world, server, tokens = api
    events = server.get("/api/v1/events?limit=500", tokens["bob"]).json()["events"]
    jobs = {j["id"] for j in server.get("/api/v1/jobs", tokens["bob"]).json()["jobs"]}
    assert all(e["job_id"] is None or e["job_id"] in jobs for e in events)
    cost = server.get("/api/v1/cost?by=team&since=", tokens["bob"]).json()
    assert {r["team"] for r in cost["costs"]} <= {"vision"}
    assert server.get("/api/v1/cost?by=planet", tokens["bob"]).status == 422
    budgets = server.get("/api/v1/budgets", tokens["bob"]).json()
    assert budgets["version"] == 2
    assert {b["name"] for b in budgets["budgets"]} == {"all", "vision", "bob-own"}
    every = server.get("/api/v1/budgets", tokens["admin"]).json()["budgets"]
    assert len(every) == 5
    research = [world.ids[k] for k in ("held", "failed", "done")] + ["crashes"]
    report = server.get("/api/v1/report?by=job&since=30d", tokens["bob"]).text
    assert not any(x in report for x in research), report
    assert "crashes" in server.get("/api/v1/report?by=job&since=30d", tokens["alice"]).text


def test_the_server_listens_on_loopback_unless_told(tmp_path: Path) -> None:
    from scheduler.core.config import Config
    from scheduler.core.errors import UserError
    from scheduler.server.app import serve

    assert Config().server.listen == "127.0.0.1:8765"
    with pytest.raises(UserError, match=r"refusing to serve tokens in clear text on 0\.0\.0\.0"):
        serve(None, "0.0.0.0:8765")  # type: ignore[arg-type]
    r = spotwise("server", "--listen", "nonsense", "-c", str(tmp_path / "none.toml"))
    assert r.returncode == 2 and r.stderr.startswith("error:")
