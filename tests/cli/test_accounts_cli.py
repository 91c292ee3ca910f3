"""`spotwise user` and `spotwise token` as an operator on the daemon's host runs them: a
token printed once (stdout holds it and nothing else), never again by `token list` nor
kept anywhere in the database but as its hash; listing, revoking and removing; one line and
exit 2 for a mistake; every change an event naming the Unix user who made it."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlmodel import Session, col, select

from scheduler.cli.common import unix_user
from scheduler.state.accounts import AuthError, authenticate
from scheduler.state.models import Event
from tests.support.api_server import table_rows
from tests.support.cli_run import spotwise
from tests.support.ops_world import make_ops_world

pytestmark = pytest.mark.slow  # the real command line, a process per command


def _ok(*args: str) -> tuple[str, str]:
    r = spotwise(*args)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout, r.stderr


def _refused(*args: str) -> str:
    r = spotwise(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


def test_users_and_tokens_from_the_command_line(tmp_path: Path) -> None:
    world = make_ops_world(tmp_path)
    c = ("-c", str(world.config))
    out, err = _ok("user", "add", "Alice", "--team", "research", *c)
    assert out == "added alice: member of research\n" and "token create alice" in err
    assert "exists already" in _refused("user", "add", "alice", "--team", "vision", *c)
    assert "needs at least one --team" in _refused("user", "add", "zed", "--role", "viewer", *c)
    assert "role 'owner'" in _refused("user", "add", "zed", "--role", "owner", "-t", "x", *c)

    token, err = _ok("token", "create", "alice", "--expires", "12h", "--label", "laptop", *c)
    token = token.strip()
    secret = token.split("_", 2)[2]
    assert token.startswith("swt_") and len(secret) == 43
    assert "shown only now" in err and secret not in err
    rows = table_rows(world.engine)
    assert secret not in repr(rows) and token not in repr(rows)
    assert hashlib.sha256(secret.encode()).hexdigest() in repr(rows["apitoken"])
    token_id = token[: len("swt_") + 10]
    assert authenticate(world.engine, token, datetime.now(UTC)).name == "alice"
    assert "no user 'nobody'" in _refused("token", "create", "nobody", *c)
    assert "--expires 'soon'" in _refused("token", "create", "alice", "--expires", "soon", *c)

    listed, _ = _ok("token", "list", *c)
    assert token_id in listed and "active" in listed and secret not in listed
    (doc,) = json.loads(_ok("token", "list", "alice", "-o", "json", *c)[0])["tokens"]
    assert doc["id"] == token_id and doc["state"] == "active" and doc["label"] == "laptop"
    assert secret not in json.dumps(doc)
    users, _ = _ok("user", "list", *c)
    assert max(map(len, users.splitlines())) <= 80
    alice = next(line.split() for line in users.splitlines() if line.startswith("alice"))
    assert alice == ["alice", "member", "research", "1"]

    assert _ok("token", "revoke", token_id, *c)[0] == f"revoked {token_id} of alice\n"
    with pytest.raises(AuthError, match="was revoked"):
        authenticate(world.engine, token, datetime.now(UTC))
    assert "revoked" in _ok("token", "list", *c)[0]
    assert "no token" in _refused("token", "revoke", "swt_zzzzzzzzzz", *c)
    second, _ = _ok("token", "create", "alice", "--expires", "never", *c)
    assert _ok("user", "remove", "alice", *c)[0] == "removed alice; 1 token(s) revoked\n"
    with pytest.raises(AuthError, match="was revoked"):
        authenticate(world.engine, second.strip(), datetime.now(UTC))

    with Session(world.engine) as s:
        kinds = ("user_added", "token_created", "token_revoked", "user_removed")
        said = s.exec(select(Event).where(col(Event.kind).in_(kinds))).all()
    assert [e.kind for e in said] == [
        "user_added", "token_created", "token_revoked", "token_created", "user_removed"
    ]  # fmt: skip
    assert {e.actor for e in said} == {unix_user()}
    assert all(secret not in e.message for e in said)
