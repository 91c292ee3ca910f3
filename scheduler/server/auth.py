"""Who is asking: the bearer token of each API request (or the dashboard's cookie), checked
against the database, and the limit on failed attempts per client address.

A refused request changes nothing in the database: checking a token is a read, and the
count of failed attempts lives in this process (a restart forgets it; tokens carry 256
random bits, so the limit keeps logs and the database quiet rather than stopping a guess
that cannot succeed). A token is never logged or echoed: log lines name the client address
and why it was refused, and the masker removes any token's secret from every line.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from scheduler.state.accounts import AuthError, Principal, authenticate

if TYPE_CHECKING:
    from starlette.requests import Request

    from scheduler.server.context import ServerContext

log = logging.getLogger("spotwise.server")

COOKIE = "spotwise_token"
WINDOW_SECONDS = 60.0
MAX_CLIENTS = 100_000  # addresses remembered at most (the oldest are forgotten first)


class ApiError(Exception):
    """A refusal: HTTP status, one line for the caller, and headers (Retry-After, ...)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class FailureLimiter:
    """At most `per_minute` failed authentications per client address in any minute; then
    429 until the oldest failure leaves the window."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, addr: str) -> int:
        """Seconds until `addr` may try again; 0: now."""
        now = time.monotonic()
        with self._lock:
            seen = self._failures.get(addr)
            if not seen:
                return 0
            while seen and now - seen[0] >= WINDOW_SECONDS:
                seen.popleft()
            if len(seen) < self.per_minute:
                return 0
            return max(1, math.ceil(WINDOW_SECONDS - (now - seen[0])))

    def failed(self, addr: str) -> None:
        now = time.monotonic()
        with self._lock:
            seen = self._failures.pop(addr, None) or deque()
            seen.append(now)
            while len(seen) > self.per_minute:
                seen.popleft()
            self._failures[addr] = seen  # re-inserted: the dict keeps recent ones last
            while len(self._failures) > MAX_CLIENTS:
                self._failures.pop(next(iter(self._failures)))


def client_address(request: Request, trusted_proxies: list[str]) -> str:
    """The client's address: the peer's, or, when the peer is a trusted proxy, the last
    address in X-Forwarded-For that is not one (a client cannot choose its own by sending
    the header: only what trusted proxies appended is believed)."""
    peer = request.client.host if request.client else "unknown"
    if not trusted_proxies or not _trusted(peer, trusted_proxies):
        return peer
    chain = [a.strip() for a in request.headers.get("x-forwarded-for", "").split(",")]
    for addr in reversed([a for a in chain if a]):
        if not _trusted(addr, trusted_proxies):
            return _valid_address(addr) or peer
    return peer


def _valid_address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _trusted(addr: str, proxies: list[str]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    for p in proxies:
        try:
            if ip in ipaddress.ip_network(p, strict=False):
                return True
        except ValueError:
            continue
    return False


def bearer(request: Request) -> str | None:
    """The token of `Authorization: Bearer TOKEN`, None when there is none."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def check(ctx: ServerContext, limiter: FailureLimiter, addr: str, token: str | None) -> Principal:
    """The principal `token` stands for, or ApiError (401, or 429 while `addr` is limited)."""
    wait = limiter.retry_after(addr)
    if wait:
        raise ApiError(
            429,
            f"too many failed authentications from {addr}: try again in {wait}s",
            {"Retry-After": str(wait)},
        )
    challenge = {"WWW-Authenticate": 'Bearer realm="spotwise"'}
    if token is None:
        raise ApiError(
            401,
            "no token: send 'Authorization: Bearer TOKEN' (spotwise token create NAME "
            "on the daemon's host makes one)",
            challenge,
        )
    try:
        return authenticate(ctx.db, token, datetime.now(UTC))  # expiry is wall-clock time
    except AuthError as e:
        limiter.failed(addr)
        log.warning("authentication failed from %s: %s", addr, e)
        raise ApiError(e.status, str(e), challenge) from None
