"""An attack on the API server: every request below is refused with the right status, and
the database is the same, row for row, after it as before; no answer and no log line
carries a token's secret."""

from __future__ import annotations

import http.client
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlmodel import Session, select

from scheduler.state.models import ApiToken
from tests.support.api_server import running_server, table_rows, token_for
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow

JOB = 'name = "x"\nteam = "{team}"\ncommand = ["true"]\ngpus = "T4:1"\n'


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("attack")
    world = make_ops_world(tmp)
    world.config.write_text(world.config.read_text() + "\n[server]\nlogin_failures = 1000\n")
    tokens = {
        "alice": token_for(world.engine, "alice", "member", ("research",)),
        "bob": token_for(world.engine, "bob", "member", ("vision",)),
        "expired": token_for(world.engine, "eve", "member", ("vision",)),
        "revoked": token_for(world.engine, "rob", "member", ("vision",)),
    }
    with Session(world.engine) as s:
        for name, field, when in (("eve", "expires_at", -1), ("rob", "revoked_at", -1)):
            row = s.exec(select(ApiToken).where(ApiToken.user_name == name)).one()
            setattr(row, field, datetime.now(UTC) + timedelta(minutes=when))
            s.add(row)
        s.commit()
    with running_server(world.config, tmp) as server:
        yield world, server, tokens
        log = server.log.read_text()
    for token in tokens.values():
        assert token.split("_", 2)[2] not in log, "a token's secret reached the server's log"


def _refused(world, server, method, path, token, status, body=None, **kw):
    before = table_rows(world.engine)
    reply = server.call(method, path, token, body, **kw)
    assert reply.status == status, (method, path, reply.status, reply.text)
    doc = json.loads(reply.text)
    assert set(doc) == {"version", "error"} and "\n" not in doc["error"], doc
    assert "Traceback" not in reply.text
    assert table_rows(world.engine) == before, f"{method} {path} changed the database"
    return doc["error"]


def test_no_wrong_expired_or_revoked_token(target) -> None:
    world, server, t = target
    held = world.ids["held"]
    for method, path, body in (
        ("GET", "/api/v1/jobs", None),
        ("POST", "/api/v1/jobs", {"file": "x.toml", "text": JOB.format(team="vision")}),
        ("POST", f"/api/v1/jobs/{held}/release", {}),
    ):
        assert _refused(world, server, method, path, None, 401, body).startswith("no token")
        wrong = t["bob"][:-2] + "zz"
        assert _refused(world, server, method, path, wrong, 401, body) == "invalid token"
        assert "expired at" in _refused(world, server, method, path, t["expired"], 401, body)
        assert "was revoked" in _refused(world, server, method, path, t["revoked"], 401, body)
    basic = server.get("/api/v1/jobs", headers={"Authorization": "Basic YWxpY2U6cHc="})
    assert basic.status == 401 and basic.headers["www-authenticate"].startswith("Bearer")


def test_another_teams_jobs_cannot_be_read_or_touched(target) -> None:
    world, server, t = target
    for key in ("held", "failed", "done"):  # research's jobs; bob is in vision
        job = world.ids[key]
        _refused(world, server, "GET", f"/api/v1/jobs/{job}", t["bob"], 404)
        _refused(world, server, "GET", f"/api/v1/jobs/{job}/logs", t["bob"], 404)
        for act in ("cancel", "requeue", "release"):
            _refused(world, server, "POST", f"/api/v1/jobs/{job}/{act}", t["bob"], 404, {})
    error = _refused(
        world, server, "POST", "/api/v1/jobs", t["bob"], 403,
        {"file": "x.toml", "text": JOB.format(team="research")},
    )  # fmt: skip
    assert "not one of bob's teams" in error
    assert _refused(world, server, "GET", f"/api/v1/events?job={world.ids['held']}", t["bob"], 404)


def test_oversized_and_malformed_bodies(target) -> None:
    world, server, t = target
    before = table_rows(world.engine)
    big = json.dumps({"file": "x.toml", "text": "#" * (2 << 20)}).encode()
    chunk = b"x" * (256 << 10)
    chunked = [f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"] * 8 + [b"0\r\n\r\n"]
    for headers, parts in (
        ({"Content-Length": str(len(big))}, [big]),
        ({"Transfer-Encoding": "chunked"}, chunked),  # 2 MiB that never says its size
    ):
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=30)
        conn.putrequest("POST", "/api/v1/jobs")
        conn.putheader("Authorization", f"Bearer {t['bob']}")
        conn.putheader("Content-Type", "application/json")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        try:
            for part in parts:
                conn.send(part)
        except OSError:
            pass  # the server refused and closed before the whole body was sent
        reply = conn.getresponse()
        assert reply.status == 413
        assert "over 1024 KiB" in json.loads(reply.read())["error"]
        conn.close()
    assert table_rows(world.engine) == before
    for raw in (b"{not json", b"[1, 2]", b'{"text": 5}', b"\xff\xfe"):
        status = 400 if raw != b'{"text": 5}' else 422
        _refused(world, server, "POST", "/api/v1/jobs", t["bob"], status, raw=raw)
    assert "not valid JSON" in _refused(
        world, server, "POST", "/api/v1/jobs", t["bob"], 400, raw=b"{"
    )


def test_path_and_header_injection(target) -> None:
    world, server, t = target
    for ref in (
        "../../etc/passwd",
        "%",
        "j-%",
        "_",
        "j-" + "_" * 12,
        "' OR 1=1 --",
        "\x00",
        "a" * 300,
    ):
        status = 400 if len(ref) > 200 else 404
        _refused(world, server, "GET", "/api/v1/jobs/" + quote(ref, safe=""), t["bob"], status)
    _refused(
        world, server, "POST", "/api/v1/jobs/" + quote("%", safe="") + "/cancel", t["bob"], 404, {}
    )
    # A Host header is never echoed into a link; a CR LF in a value never becomes a header.
    reply = server.get("/api/v1/jobs?limit=1&team=vision%0d%0aSet-Cookie:%20x=1", t["bob"],
                       headers={"Host": "evil.example"})  # fmt: skip
    assert reply.status == 200 and "set-cookie" not in reply.headers
    page = server.get("/api/v1/jobs?limit=1", t["bob"], headers={"Host": "evil.example"})
    assert "evil" not in page.headers.get("link", "") and page.headers["link"].startswith("</api")
    # The response headers every answer carries.
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-content-type-options"] == "nosniff"


def test_a_token_never_appears_in_an_answer_or_a_log_line(target) -> None:
    world, server, t = target
    secret = t["alice"].split("_", 2)[2]
    token = t["alice"]
    for path in (
        f"/api/v1/jobs/{token}",
        f"/api/v1/jobs/{token}/logs",
        f"/api/v1/events?job={quote(token)}",
        f"/api/v1/jobs?state={token}",
    ):
        error = _refused(
            world, server, "GET", path, t["alice"], 404 if "state" not in path else 400
        )
        assert secret not in error
    error = _refused(world, server, "GET", "/api/v1/jobs", t["alice"] + "x", 401)
    assert secret not in error
    job = {"file": t["alice"], "text": "name = "}
    assert secret not in _refused(world, server, "POST", "/api/v1/jobs", t["alice"], 400, job)
    # The log is read at the end of the module (the fixture): no token's secret in it.


def test_failed_logins_are_limited_per_client(tmp_path: Path) -> None:
    world = make_ops_world(tmp_path)
    world.config.write_text(world.config.read_text() + "\n[server]\nlogin_failures = 3\n")
    good = token_for(world.engine, "alice", "member", ("research",))
    with running_server(world.config, tmp_path) as server:
        before = table_rows(world.engine)
        for i in range(3):  # a client that forges X-Forwarded-For is still one client
            r = server.get(
                "/api/v1/jobs",
                "swt_0000000000_" + "x" * 43,
                headers={"X-Forwarded-For": f"10.0.0.{i}"},
            )
            assert r.status == 401
        limited = server.get("/api/v1/jobs", good)
        assert limited.status == 429 and int(limited.headers["retry-after"]) > 0
        assert "too many failed authentications from 127.0.0.1" in limited.json()["error"]
        assert table_rows(world.engine) == before
