"""Who may use the API server: users with a role and teams, and their API tokens.

A token is `swt_<id>_<secret>`: the id is public (listing, revoking, log lines), the secret
is 256 random bits shown once at creation; only its SHA-256 is stored, and it is compared in
constant time. A fast hash is the right one here (GitHub and PyPI store theirs the same way):
the secret is random, not a password, so there is nothing to guess by trying hashes. Users
and tokens are managed on the daemon's host (`spotwise user`, `spotwise token`), which
writes the database directly; each change is an event naming the Unix user who made it.

What a principal may do (`Principal`): an admin everything; a member reads and acts on the
jobs of its teams and submits only under them; a viewer reads its teams' jobs. A job's
environment values are shown only to the users of its team.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from providers import masking
from scheduler.core.errors import UserError
from scheduler.core.jobspec import normalise_team
from scheduler.state.audit import emit
from scheduler.state.models import ApiToken, ApiUser
from scheduler.state.read_connection import reading

if TYPE_CHECKING:
    from scheduler.state.read_connection import Database

ROLES = ("admin", "member", "viewer")
PREFIX = "swt_"
_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_ID_LENGTH = 10
_TOKEN = re.compile(rf"{PREFIX}([{_ID_ALPHABET}]{{{_ID_LENGTH}}})_([A-Za-z0-9_-]{{43}})")
_NAME = re.compile(r"[a-z0-9][a-z0-9._@-]{0,62}")

# Every message and log line a person may read masks a token's secret (the id stays).
TOKEN_RULE = masking.rule(
    "spotwise-api-token",
    rf"\b({PREFIX}[{_ID_ALPHABET}]{{{_ID_LENGTH}}}_)[A-Za-z0-9_-]{{4,}}",
    r"\1" + masking.MASK,
    "GET /api/v1/jobs/swt_0123456789_abcdefghijABCDEFGHIJabcdefghijABCDEFGHIJabc",
    "abcdefghijABCDEFGHIJabcdefghijABCDEFGHIJabc",
)
masking.register("spotwise-api", [TOKEN_RULE])


def mask_tokens(text: str) -> str:
    """`text` with the secret of any API token in it masked (and nothing else changed)."""
    return TOKEN_RULE.pattern.sub(TOKEN_RULE.replacement, text)


class AuthError(Exception):
    """A request that is refused: its HTTP status and one line for the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking, as the server checks each request."""

    name: str
    role: str
    teams: tuple[str, ...]
    token_id: str = ""

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    def visible_teams(self) -> tuple[str, ...] | None:
        """The teams whose jobs this principal reads; None: every team."""
        return None if self.admin else self.teams

    def reads(self, team: str) -> bool:
        return self.admin or team in self.teams

    def acts_on(self, team: str) -> bool:
        """Cancel, release, requeue: admins, and members of the job's team."""
        return self.admin or (self.role == "member" and team in self.teams)

    def sees_env_of(self, team: str) -> bool:
        """A job's environment values: only the users of its team."""
        return team in self.teams


def user_name(name: str) -> str:
    out = name.strip().lower()
    if not _NAME.fullmatch(out):
        raise UserError(
            f"user name {name!r}: use lowercase letters, digits and . _ @ - (at most 63)"
        )
    return out


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _teams_text(teams: tuple[str, ...]) -> str:
    return ",".join(teams)


def _teams_of(text: str) -> tuple[str, ...]:
    return tuple(t for t in text.split(",") if t)


def add_user(
    engine: Engine,
    name: str,
    role: str,
    teams: list[str],
    now: datetime,
    by: str,
    known_teams: list[str] | None = None,
) -> ApiUser:
    """A new user (UserError if the name is taken). Members and viewers need a team;
    `known_teams` (the config's `[daemon] teams`, when it declares any) bounds them."""
    name = user_name(name)
    if role not in ROLES:
        raise UserError(f"role {role!r}: use one of {', '.join(ROLES)}")
    clean = tuple(dict.fromkeys(normalise_team(t) for t in teams))
    if role != "admin" and not clean:
        raise UserError(f"a {role} needs at least one --team (the teams whose jobs it sees)")
    if known_teams:
        unknown = [t for t in clean if t not in known_teams and t != "default"]
        if unknown:
            raise UserError(
                f"team {unknown[0]!r} is not in the config's [daemon] teams "
                f"({', '.join(known_teams)})"
            )
    with Session(engine) as s:
        if s.get(ApiUser, name) is not None:
            raise UserError(f"user {name!r} exists already (spotwise user list)")
        user = ApiUser(
            name=name, role=role, teams=_teams_text(clean), created_at=now, created_by=by
        )
        s.add(user)
        teams_said = f" of {', '.join(clean)}" if clean else ""
        emit(s, now, "user_added", f"user {name}: {role}{teams_said}", actor=by or None)
        s.commit()
        s.refresh(user)
        return user


def remove_user(engine: Engine, name: str, now: datetime, by: str) -> int:
    """Disable a user and revoke its tokens (rows stay: events and jobs name it). Returns
    how many tokens were revoked."""
    name = user_name(name)
    with Session(engine) as s:
        user = s.get(ApiUser, name)
        if user is None or user.disabled_at is not None:
            raise UserError(f"no user {name!r} (spotwise user list)")
        user.disabled_at = now
        s.add(user)
        live = s.exec(
            select(ApiToken).where(ApiToken.user_name == name, col(ApiToken.revoked_at).is_(None))
        ).all()
        for t in live:
            t.revoked_at = now
            s.add(t)
        emit(s, now, "user_removed", f"user {name} removed, {len(live)} token(s) revoked",
             actor=by or None)  # fmt: skip
        s.commit()
        return len(live)


def users(engine: Engine) -> list[ApiUser]:
    with Session(engine) as s:
        return list(s.exec(select(ApiUser).order_by(col(ApiUser.name))).all())


def create_token(
    engine: Engine,
    name: str,
    now: datetime,
    by: str,
    expires_in: timedelta | None,
    label: str = "",
) -> tuple[ApiToken, str]:
    """A new token for user `name`: (its row, the token). The token is returned once and
    never stored; only the hash of its secret is."""
    name = user_name(name)
    token_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(_ID_LENGTH))
    secret = secrets.token_urlsafe(32)  # 43 characters, 256 bits
    with Session(engine) as s:
        user = s.get(ApiUser, name)
        if user is None or user.disabled_at is not None:
            raise UserError(f"no user {name!r}: add it first (spotwise user add {name} ...)")
        row = ApiToken(
            id=token_id,
            user_name=name,
            secret_sha256=_hash(secret),
            label=label,
            created_at=now,
            created_by=by,
            expires_at=now + expires_in if expires_in is not None else None,
        )
        s.add(row)
        until = f", expires {row.expires_at:%Y-%m-%d}" if row.expires_at else ", never expires"
        emit(s, now, "token_created", f"token {token_id} for {name}{until}", actor=by or None)
        s.commit()
        s.refresh(row)
    return row, f"{PREFIX}{token_id}_{secret}"


def tokens(engine: Engine, name: str | None = None) -> list[ApiToken]:
    with Session(engine) as s:
        q = select(ApiToken).order_by(col(ApiToken.created_at))
        if name:
            q = q.where(ApiToken.user_name == user_name(name))
        return list(s.exec(q).all())


def revoke_token(engine: Engine, token_id: str, now: datetime, by: str) -> ApiToken:
    """Revoke by id (or by the whole token, whose id is its first part)."""
    m = _TOKEN.fullmatch(token_id.strip())
    wanted = m.group(1) if m else token_id.strip().removeprefix(PREFIX)
    with Session(engine) as s:
        row = s.get(ApiToken, wanted)
        if row is None:
            raise UserError(f"no token {wanted!r} (spotwise token list)")
        if row.revoked_at is None:
            row.revoked_at = now
            s.add(row)
            emit(s, now, "token_revoked", f"token {row.id} of {row.user_name} revoked",
                 actor=by or None)  # fmt: skip
            s.commit()
            s.refresh(row)
        return row


def token_id_of(token: str) -> str | None:
    """The public id of a well-formed token, else None."""
    m = _TOKEN.fullmatch(token)
    return m.group(1) if m else None


def authenticate(db: Database, token: str, now: datetime) -> Principal:
    """The principal a bearer token stands for, or AuthError(401). A read: nothing is
    written, so a refused request changes nothing. The secret's hash is compared in
    constant time, and a malformed or unknown token costs the same comparison."""
    m = _TOKEN.fullmatch(token)
    token_id, secret = (m.group(1), m.group(2)) if m else ("", token)
    with reading(db) as query:
        rows = query(
            "SELECT apitoken.secret_sha256, apitoken.expires_at, apitoken.revoked_at, "
            "apiuser.name, apiuser.role, apiuser.teams, apiuser.disabled_at "
            "FROM apitoken JOIN apiuser ON apiuser.name = apitoken.user_name "
            "WHERE apitoken.id = ?",
            (token_id,),
        )
    stored = rows[0][0] if rows else "0" * 64
    if not hmac.compare_digest(_hash(secret), stored) or not rows:
        raise AuthError(401, "invalid token")
    _h, expires, revoked, name, role, teams, disabled = rows[0]
    if revoked is not None or disabled is not None:
        raise AuthError(401, f"token {PREFIX}{token_id} was revoked: ask for a new one")
    if expires is not None and _aware(expires) <= now:
        raise AuthError(
            401, f"token {PREFIX}{token_id} expired at {_aware(expires):%Y-%m-%d %H:%M}Z"
        )
    return Principal(name=name, role=role, teams=_teams_of(teams), token_id=token_id)


def _aware(value: datetime | str) -> datetime:
    from datetime import UTC

    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
