"""The real `spotwise server` for tests: a new process on a free loopback port over a test's
database, with users and tokens made as an operator makes them, and a small HTTP client
(the standard library's, as the CLI's remote mode uses) that never raises on a 4xx."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.state.accounts import add_user, create_token
from tests.support.cli_run import env

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def token_for(
    engine: Any,
    name: str,
    role: str = "member",
    teams: tuple[str, ...] = (),
    expires: timedelta | None = timedelta(days=1),
) -> str:
    """A user (made if new) and a fresh token for it."""
    from sqlmodel import Session

    from scheduler.state.models import ApiUser

    with Session(engine) as s:
        known = s.get(ApiUser, name) is not None
    if not known:
        add_user(engine, name, role, list(teams), datetime.now(UTC), "root")
    return create_token(engine, name, datetime.now(UTC), "root", expires)[1]


@dataclass
class Reply:
    status: int
    text: str
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.text)


@dataclass
class Server:
    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Reply:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json"} if data is not None else {}
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return Reply(
                    r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
                )
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read().decode(), {k.lower(): v for k, v in e.headers.items()})

    def get(self, path: str, token: str | None = None, **kw: Any) -> Reply:
        return self.call("GET", path, token, **kw)

    def post(self, path: str, token: str | None = None, body: Any = None, **kw: Any) -> Reply:
        return self.call("POST", path, token, body if body is not None else {}, **kw)


@contextmanager
def running_server(config: Path, tmp: Path, *extra: str) -> Iterator[Server]:
    """`spotwise server -c CONFIG --listen 127.0.0.1:PORT`, until the block ends."""
    port = free_port()
    log = tmp / f"server-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "server", "-c", str(config),
             "--listen", f"127.0.0.1:{port}", *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env(), cwd=tmp,
        )  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", log, proc)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                if server.get("/healthz").status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not start: {log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def table_rows(engine: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, to show that a refused request changed nothing."""
    import sqlalchemy as sa

    out: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as c:
        for name in sorted(sa.inspect(c).get_table_names()):
            out[name] = sorted(
                map(tuple, c.execute(sa.text(f'SELECT * FROM "{name}"')).all()), key=repr
            )
    return out
