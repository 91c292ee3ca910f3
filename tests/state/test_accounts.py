"""Users and API tokens: only a hash is stored, a token works until it expires or is
revoked, its secret is compared in constant time and masked wherever text is shown, and
each change is an event naming who made it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, select

from providers.masking import mask
from scheduler.core.errors import UserError
from scheduler.state import accounts
from scheduler.state.accounts import (
    AuthError,
    Principal,
    add_user,
    authenticate,
    create_token,
    remove_user,
    revoke_token,
)
from scheduler.state.db import open_db
from scheduler.state.models import ApiToken, Event

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path):
    return open_db(f"sqlite:///{tmp_path / 'spotwise.db'}")


def test_a_token_is_shown_once_and_only_its_hash_is_kept(engine) -> None:
    add_user(engine, "Alice", "member", ["Research"], NOW, "root")
    row, token = create_token(engine, "alice", NOW, "root", timedelta(days=90))
    assert token.startswith(f"swt_{row.id}_") and len(token) == 4 + 10 + 1 + 43
    secret = token.split("_", 2)[2]
    with Session(engine) as s:
        stored = s.exec(select(ApiToken)).one()
        dump = repr(stored.model_dump())
    assert secret not in dump and token not in dump
    assert stored.secret_sha256 != secret and len(stored.secret_sha256) == 64
    p = authenticate(engine, token, NOW + timedelta(days=1))
    assert p == Principal("alice", "member", ("research",), row.id)
    with Session(engine) as s:
        events = [(e.kind, e.actor) for e in s.exec(select(Event)).all()]
        assert all(secret not in e.message for e in s.exec(select(Event)).all())
    assert events == [("user_added", "root"), ("token_created", "root")]


def test_wrong_expired_and_revoked_tokens_are_refused(engine) -> None:
    add_user(engine, "bob", "viewer", ["vision"], NOW, "root")
    row, token = create_token(engine, "bob", NOW, "root", timedelta(hours=1))
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (wrong, "swt_nope", "", "Bearer " + token, token + "x"):
        with pytest.raises(AuthError, match=r"^invalid token$"):
            authenticate(engine, bad, NOW)
    with pytest.raises(AuthError, match="expired at"):
        authenticate(engine, token, NOW + timedelta(hours=1))
    revoke_token(engine, f"swt_{row.id}", NOW, "root")
    with pytest.raises(AuthError, match="was revoked"):
        authenticate(engine, token, NOW)
    _row2, token2 = create_token(engine, "bob", NOW, "root", None)
    assert remove_user(engine, "bob", NOW, "root") == 1  # the live one; one was revoked
    with pytest.raises(AuthError, match="was revoked"):
        authenticate(engine, token2, NOW)


def test_the_secret_is_compared_in_constant_time(engine, monkeypatch) -> None:
    add_user(engine, "carol", "admin", [], NOW, "root")
    _row, token = create_token(engine, "carol", NOW, "root", None)
    calls: list[tuple[str, str]] = []
    real = accounts.hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(accounts.hmac, "compare_digest", spy)
    authenticate(engine, token, NOW)
    with pytest.raises(AuthError):
        authenticate(engine, "swt_0000000000_" + "x" * 43, NOW)  # unknown id: same compare
    assert len(calls) == 2 and all(len(a) == len(b) == 64 for a, b in calls)


def test_a_token_is_masked_in_every_line_a_person_reads(engine) -> None:
    add_user(engine, "dave", "member", ["ml"], NOW, "root")
    row, token = create_token(engine, "dave", NOW, "root", None)
    secret = token.split("_", 2)[2]
    for text in (f"GET /api/v1/jobs/{token} 404", f"no job {token!r}", f"token={token}"):
        assert secret not in mask(text) and secret not in accounts.mask_tokens(text)
        assert f"swt_{row.id}_" in accounts.mask_tokens(text)


def test_roles_and_teams(engine) -> None:
    with pytest.raises(UserError, match="needs at least one --team"):
        add_user(engine, "erin", "member", [], NOW, "root")
    with pytest.raises(UserError, match="role 'owner'"):
        add_user(engine, "erin", "owner", ["ml"], NOW, "root")
    with pytest.raises(UserError, match="not in the config's"):
        add_user(engine, "erin", "member", ["nope"], NOW, "root", known_teams=["ml"])
    add_user(engine, "erin", "member", ["ml", "ML"], NOW, "root")
    with pytest.raises(UserError, match="exists already"):
        add_user(engine, "erin", "viewer", ["ml"], NOW, "root")
    member = Principal("erin", "member", ("ml",))
    viewer = Principal("fay", "viewer", ("ml",))
    admin = Principal("gus", "admin", ())
    assert member.acts_on("ml") and not member.acts_on("vision") and member.reads("ml")
    assert viewer.reads("ml") and not viewer.acts_on("ml") and viewer.sees_env_of("ml")
    assert admin.acts_on("vision") and admin.visible_teams() is None
    assert not admin.sees_env_of("vision")  # env values: the job's team only
