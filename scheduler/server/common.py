"""What the API's routes share: the request's principal, JSON answers written exactly as the
CLI's `-o json` writes them, a user's mistake as one line with its HTTP status, and the
parsing of the query values the commands take (states, times).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from scheduler.core.errors import UserError
from scheduler.server.auth import COOKIE, ApiError, FailureLimiter, bearer, check, client_address
from scheduler.state.accounts import Principal, mask_tokens

if TYPE_CHECKING:
    from scheduler.server.context import ServerContext

PAGE_SIZE = 500  # jobs per page unless ?limit= says otherwise
MAX_PAGE = 5000


def context(request: Request) -> ServerContext:
    return request.app.state.ctx  # type: ignore[no-any-return]


def limiter(request: Request) -> FailureLimiter:
    return request.app.state.limiter  # type: ignore[no-any-return]


def address(request: Request) -> str:
    ctx = context(request)
    return client_address(request, ctx.own.server.trusted_proxies)


def principal(request: Request) -> Principal:
    """The caller of an API route, by its bearer token (never a cookie: a page elsewhere
    cannot make a browser act here)."""
    return check(context(request), limiter(request), address(request), bearer(request))


def page_principal(request: Request) -> Principal:
    """The reader of a dashboard page, by the cookie the login page set."""
    token = request.cookies.get(COOKIE) or None
    return check(context(request), limiter(request), address(request), token)


def json_response(doc: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """`doc` as the CLI prints it with -o json (read_models.dumps_document), byte for byte."""
    from scheduler.state.read_models import dumps_document

    return Response(
        dumps_document(doc) + "\n",
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def error_doc(message: str) -> dict[str, Any]:
    from scheduler.state.read_models import document

    return document(error=mask_tokens(message))


def user_error(e: UserError) -> ApiError:
    """A UserError from the shared code as the API's answer: 404 for what is not there,
    409 for a job in the wrong state, 400 otherwise."""
    text = str(e)
    if text.startswith(("no job ", "no user ", "no token ")):
        return ApiError(404, text)
    if " is already " in text or ", not HELD" in text or ", not FAILED" in text:
        return ApiError(409, text)
    return ApiError(400, text)


def states_of(values: list[str] | None) -> list[str]:
    """`?state=running&state=held` or `?state=running,held`, checked as `status` checks."""
    from scheduler.core.states import JobState

    states = [x for s in values or [] for x in s.split(",") if x]
    known = {x.value for x in JobState}
    bad = [x for x in states if x.upper() not in known]
    if bad:
        raise ApiError(400, f"unknown state {bad[0]!r}: use one of {', '.join(sorted(known))}")
    return states


def since_time(text: str | None, now: datetime, name: str = "since") -> datetime | None:
    """'7d' (back from now) or an ISO time, as the commands' --since takes it."""
    if not text:
        return None
    from providers.settings import parse_duration

    try:
        return now - parse_duration(text)
    except (ValueError, TypeError, OverflowError):
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(
            400, f"{name}: {text[:40]!r} is neither a duration (7d, 12h) nor an ISO time"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def visible(p: Principal) -> tuple[str, ...] | None:
    return p.visible_teams()
