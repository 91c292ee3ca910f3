"""The API server's application: its routes, how every refusal reads, and how it runs.

Every answer is JSON (the API) or a page (the dashboard). A user's mistake is a 4xx with one
line (`{"version": 2, "error": "..."}`), never a 500 with a traceback: a bad query value
names the parameter, a body that is not JSON says so, one over MAX_BODY is refused before it
is read whole. Anything else is logged with its traceback here and answered with one line.
The OpenAPI document is at /api/v1/openapi.json; the interactive pages FastAPI would add
load scripts from the internet, so they are left out (the dashboard works offline).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.server.auth import ApiError, FailureLimiter
from scheduler.server.common import error_doc, json_response
from scheduler.server.context import ServerContext

log = logging.getLogger("spotwise.server")

MAX_BODY = 1 << 20  # a job file is a few hundred bytes; 1 MiB is far beyond any real one
API_VERSION = "1"


def create_app(ctx: ServerContext) -> FastAPI:
    from scheduler.server import dashboard, jobs, spend

    app = FastAPI(
        title="spotwise",
        version=API_VERSION,
        summary="The spotwise CLI's operations over HTTP: jobs, events, budgets, cost, prices.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
    )
    app.state.ctx = ctx
    app.state.limiter = FailureLimiter(ctx.own.server.login_failures)
    app.include_router(jobs.router)
    app.include_router(spend.router)
    app.include_router(dashboard.router)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> Any:
        from scheduler.state.read_models import daemon_heartbeat, document

        daemon_heartbeat(ctx.db)  # the database answers
        return json_response(document(status="ok"))

    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(_Headers)
    app.add_middleware(_BodyLimit)
    return app


async def _api_error(request: Request, e: ApiError) -> Response:
    if request.url.path.startswith("/ui") and e.status in (401, 403):
        from scheduler.server.dashboard import login_page

        return login_page(str(e), e.status)
    return json_response(error_doc(str(e)), e.status, e.headers)


async def _invalid(request: Request, e: RequestValidationError) -> Response:
    """One line for the first problem, naming where it is."""
    errors = e.errors()
    first = errors[0] if errors else {}
    where = [str(x) for x in first.get("loc", ())]
    kind = first.get("type", "")
    if kind == "json_invalid":
        return json_response(error_doc("the request body is not valid JSON"), 400)
    if where[:1] == ["body"] and kind in ("missing", "model_attributes_type", "dict_type"):
        field = where[1] if len(where) > 1 else "body"
        text = f"the request body needs {field!r}" if len(where) > 1 else "a JSON object is needed"
        return json_response(error_doc(text), 400)
    place = {"query": "query parameter", "path": "path", "body": "body field"}.get(
        where[0] if where else "", "value"
    )
    name = ".".join(where[1:]) or "?"
    msg = str(first.get("msg", "is not valid"))
    return json_response(error_doc(f"{place} {name!r}: {msg}"), 422)


async def _http_error(request: Request, e: HTTPException) -> Response:
    text = {404: "no such page or route", 405: "method not allowed here"}.get(
        e.status_code, str(e.detail)
    )
    return json_response(error_doc(text), e.status_code, dict(e.headers or {}))


async def _unexpected(request: Request, e: Exception) -> Response:
    from scheduler.core.errors import UserError

    if isinstance(e, UserError):  # a database that cannot be used, a config problem
        log.error("request %s %s: %s", request.method, request.url.path, e)
        return json_response(error_doc(str(e)), 503)
    log.exception("request %s %s failed", request.method, request.url.path)
    return json_response(error_doc("internal error: the server's log has the details"), 500)


class _BodyLimit:
    """Bodies over MAX_BODY are refused with 413: by Content-Length before a byte is read,
    and while reading when there is none (chunked)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_large = False
        if declared is not None:
            try:
                too_large = int(declared) > MAX_BODY
            except ValueError:
                too_large = False
        if too_large:
            await _refuse(send, 413, f"the request body is over {MAX_BODY // 1024} KiB")
            return
        # Read the body here, up to the limit, before the application sees any of it: one
        # that outgrows the limit is refused without being read whole.
        if scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > MAX_BODY:
                await _refuse(send, 413, f"the request body is over {MAX_BODY // 1024} KiB")
                return
            if not message.get("more_body"):
                break
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)


async def _refuse(send: Send, status: int, message: str) -> None:
    response = JSONResponse(error_doc(message), status_code=status)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class _Headers:
    """What every answer carries: no caching of what a token read, no MIME sniffing, no
    framing of the dashboard by another site."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers += [
                    (b"cache-control", b"no-store"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def split_listen(listen: str) -> tuple[str, int]:
    """'HOST:PORT' or '[V6]:PORT' as (host, port)."""
    from scheduler.core.errors import UserError

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise UserError(f"--listen {listen!r}: use HOST:PORT, e.g. 127.0.0.1:8765")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    ctx: ServerContext,
    listen: str,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    insecure: bool = False,
) -> None:
    """Run the server until SIGTERM or SIGINT (uvicorn's own handling)."""
    import uvicorn

    from scheduler.core.errors import UserError

    host, port = split_listen(listen)
    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together: give both or neither")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            raise UserError(f"{path}: no such file (a PEM certificate or key)")
    if tls_cert is not None and tls_key is not None:
        _check_tls(tls_cert, tls_key)
    if not is_loopback(host) and tls_cert is None and not insecure:
        raise UserError(
            f"refusing to serve tokens in clear text on {host}: give --tls-cert and --tls-key, "
            "or listen on 127.0.0.1 behind a TLS reverse proxy (--insecure-http if the network "
            "is trusted)"
        )
    config = uvicorn.Config(
        create_app(ctx),
        host=host,
        port=port,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        proxy_headers=False,  # trusted_proxies decides whose X-Forwarded-For counts
        server_header=False,
        log_config=None,  # our handler: one line per event, tokens masked
        timeout_keep_alive=15,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    scheme = "https" if tls_cert else "http"
    log.info("spotwise server on %s://%s:%d (database %s)", scheme, host, port,
             ctx.own.daemon.masked_database_url())  # fmt: skip
    try:
        server.run()
    except OSError as e:
        raise UserError(f"cannot listen on {listen}: {e.strerror or e}") from None


def _check_tls(cert: Path, key: Path) -> None:
    """Load the certificate and key as the server will, before it says it listens: a file
    that is not one, or a key of another certificate, is one line naming both files."""
    import ssl

    from scheduler.core.errors import UserError

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        reason = getattr(e, "reason", None) or e.strerror or str(e)
        raise UserError(
            f"the TLS certificate or key cannot be used ({cert}, {key}): {reason}"
        ) from None
