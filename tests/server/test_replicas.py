"""Two `spotwise server` replicas on one database hold nothing of their own: a job submitted
through one is read and cancelled through the other, and a token revoked on the daemon's
host is refused by both at their next request."""

from __future__ import annotations

import pytest

from tests.support.api_server import running_server, token_for
from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow

JOB = 'name = "twice"\nteam = "vision"\ncommand = ["true"]\ngpus = "T4:1"\n'


def test_two_replicas_share_everything_through_the_database(tmp_path) -> None:
    world = make_ops_world(tmp_path)
    token = token_for(world.engine, "bob", "member", ("vision",))
    with (
        running_server(world.config, tmp_path) as one,
        running_server(world.config, tmp_path) as two,
    ):
        made = one.post("/api/v1/jobs", token, {"file": "twice.toml", "text": JOB})
        assert made.status == 201, made.text
        job_id = made.json()["id"]
        assert two.get(f"/api/v1/jobs/{job_id}", token).json()["job"]["submitted_by"] == "bob"
        assert two.post(f"/api/v1/jobs/{job_id}/cancel", token).status == 200
        events = one.get(f"/api/v1/events?job={job_id}", token).json()["events"]
        assert [(e["kind"], e["actor"]) for e in events][-1] == ("cancel_requested", "bob")
        token_id = token[: len("swt_") + 10]
        revoked = spotwise("token", "revoke", token_id, "-c", str(world.config))
        assert revoked.returncode == 0, revoked.stderr
        for server in (one, two):
            refused = server.get("/api/v1/jobs", token)
            assert refused.status == 401 and "was revoked" in refused.json()["error"]
