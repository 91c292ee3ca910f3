"""`spotwise bench api`: the API server under load, as teams use it, beside the daemon.

A daemon (on the local market, so no cloud account) and one `spotwise server` run as their
own processes on a fresh database, both on loopback. N clients (threads, each with its own
keep-alive connection and its own user's token, spread over four teams) each submit jobs and
read status pages and single jobs for a bounded time. The jobs ask for what nothing offers
(8x H100 under a cent an hour), so the daemon steps each of them every pass without starting
a process per job. Afterwards every id a client was given must be in the server's `status`
and in the database, submitted by that client's user: no job lost.

Measured: requests per second by kind and overall, latency percentiles (p50, p95, p99, max)
by kind, errors by kind. Nothing leaves the machine: every address is 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

TEAMS = ("research", "vision", "speech", "infra")
JOB = (
    'name = "load-{n}"\nteam = "{team}"\ncommand = ["python", "-c", "pass"]\n'
    'gpus = "H100:8"\nmax_price_per_hour = 0.01\n'
)
READS_PER_SUBMIT = 4


@dataclass
class Tally:
    """What the clients saw, by kind of request."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    submitted: dict[str, str] = field(default_factory=dict)  # job id -> user
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.latencies.setdefault(kind, []).append(seconds)
            if error is not None:
                self.errors.setdefault(kind, []).append(error)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while not check():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def _client(
    port: int, token: str, user: str, team: str, until: float, tally: Tally, serial: Any
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    mine: list[str] = []
    step = 0
    while time.monotonic() < until:
        if step % (READS_PER_SUBMIT + 1) == 0:
            kind, method = "submit", "POST"
            body = json.dumps({"file": "load.toml", "text": JOB.format(n=next(serial), team=team)})
            path = "/api/v1/jobs"
        else:
            kind, method, body = ("status", "GET", None)
            path = "/api/v1/jobs?limit=50"
            if mine and step % 2 == 0:
                kind, path = "show", f"/api/v1/jobs/{mine[-1]}"
        step += 1
        t0 = time.perf_counter()
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            ok = resp.status < 400
            error = None if ok else f"{resp.status} {data[:200]!r}"
            if ok and kind == "submit":
                job_id = json.loads(data)["id"]
                mine.append(job_id)
                with tally.lock:
                    tally.submitted[job_id] = user
        except (OSError, http.client.HTTPException, ValueError) as e:
            error = f"{type(e).__name__}: {e}"
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        tally.add(kind, time.perf_counter() - t0, error)
    conn.close()


def _percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    if not xs:
        return {}

    def at(q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000

    return {"p50_ms": at(0.5), "p95_ms": at(0.95), "p99_ms": at(0.99), "max_ms": xs[-1] * 1000}


def run(clients: int = 100, seconds: float = 30.0, workdir: Path | None = None) -> dict[str, Any]:
    """Start a daemon and a server, load them, check nothing was lost; the figures."""
    from scheduler.state.accounts import add_user, create_token
    from scheduler.state.db import open_existing

    own = tempfile.TemporaryDirectory(prefix="spotwise-bench-api-") if workdir is None else None
    root = Path(own.name) if own is not None else Path(workdir)  # type: ignore[arg-type]
    config = root / "spotwise.toml"
    config.write_text(
        f'[daemon]\nstate_dir = "{root / "state"}"\nreconcile_interval = "2s"\n'
        f"teams = {list(TEAMS)!r}\n\n[providers.local]\nspeedup = 1\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SPOTWISE_API", None)
    env.pop("SPOTWISE_TOKEN", None)
    cmd = [sys.executable, "-m", "scheduler"]
    daemon_log, server_log = root / "daemon.log", root / "server.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with daemon_log.open("wb") as out:
            daemon = subprocess.Popen([*cmd, "daemon", "-c", str(config), "--log-level", "WARNING"],
                                      stdout=out, stderr=subprocess.STDOUT, env=env)  # fmt: skip
        procs.append(daemon)
        db = root / "state" / "spotwise.db"
        _wait(lambda: _ready(db), "the daemon", daemon, daemon_log)
        engine = open_existing(f"sqlite:///{db}")
        now = datetime.now(UTC)
        tokens = []
        for i in range(clients):
            team = TEAMS[i % len(TEAMS)]
            add_user(engine, f"user{i}", "member", [team], now, "bench")
            tokens.append((f"user{i}", team, create_token(engine, f"user{i}", now, "bench",
                                                          timedelta(hours=2))[1]))  # fmt: skip
        port = _free_port()
        with server_log.open("wb") as out:
            server = subprocess.Popen(
                [*cmd, "server", "-c", str(config), "--listen", f"127.0.0.1:{port}",
                 "--log-level", "WARNING"],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        procs.append(server)
        _wait(lambda: _healthy(port), "the server", server, server_log)
        tally = Tally()
        counter = iter(range(10**9))
        lock = threading.Lock()

        def serial() -> int:
            with lock:
                return next(counter)

        class _Serial:
            def __next__(self) -> int:
                return serial()

        start = time.monotonic()
        until = start + seconds
        threads = [
            threading.Thread(target=_client, args=(port, tok, user, team, until, tally, _Serial()))
            for user, team, tok in tokens
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        elapsed = time.monotonic() - start
        lost = _lost(port, tokens, tally, engine)
        daemon_alive = daemon.poll() is None
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if own is not None:
            own.cleanup()
    total = sum(len(v) for v in tally.latencies.values())
    kinds = {
        kind: {
            "requests": len(xs),
            "per_second": round(len(xs) / elapsed, 1),
            "errors": len(tally.errors.get(kind, [])),
            **{k: round(v, 1) for k, v in _percentiles(xs).items()},
        }
        for kind, xs in sorted(tally.latencies.items())
    }
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests": total,
        "per_second": round(total / elapsed, 1),
        "all": {k: round(v, 1) for k, v in
                _percentiles([x for xs in tally.latencies.values() for x in xs]).items()},
        "kinds": kinds,
        "errors": sum(len(v) for v in tally.errors.values()),
        "first_errors": [e for v in tally.errors.values() for e in v][:5],
        "jobs_submitted": len(tally.submitted),
        "jobs_lost": lost,
        "daemon_alive": daemon_alive,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                   f"{platform.python_version()}",
        "median_status_ms": round(statistics.median(tally.latencies.get("status", [0])) * 1000, 1),
    }  # fmt: skip


def _ready(db: Path) -> bool:
    """The daemon has migrated the database and written its heartbeat."""
    import sqlite3

    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return bool(conn.execute("SELECT count(*) FROM daemonlease").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def _healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def _lost(port: int, tokens: list[tuple[str, str, str]], tally: Tally, engine: Any) -> list[str]:
    """Ids a client was given that the server's status (every page, as an admin) or the
    database does not have, or has under another user."""
    from sqlmodel import Session, select

    from scheduler.state.models import Job

    with Session(engine) as s:
        rows = dict(s.exec(select(Job.id, Job.submitted_by)).all())
    seen: set[str] = set()
    for _user, _team, token in tokens[: len(TEAMS)]:  # one member of each team sees all
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        offset = 0
        while True:
            conn.request("GET", f"/api/v1/jobs?limit=5000&offset={offset}",
                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            doc = json.loads(conn.getresponse().read())
            seen |= {j["id"] for j in doc["jobs"]}
            if len(doc["jobs"]) < 5000:
                break
            offset += 5000
        conn.close()
    return sorted(i for i, user in tally.submitted.items() if i not in seen or rows.get(i) != user)


def main() -> None:  # pragma: no cover - a person runs it
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    print(json.dumps(run(args.clients, args.seconds), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
