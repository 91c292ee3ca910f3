"""A throwaway PostgreSQL server for the tests: in a temp dir, on a free loopback port.

Found in this order: $SPOTWISE_TEST_PG_URL (a server you run; the URL's user must be allowed
to create databases), else Debian's (or any) `initdb` started as a private cluster. As root,
initdb refuses to run, so the cluster runs as the `postgres` user (Debian's package makes it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

ENV_URL = "SPOTWISE_TEST_PG_URL"
ENV_REQUIRE = "SPOTWISE_REQUIRE_PG"


def find_bindir() -> Path | None:
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    return Path(found[-1]).parent if found else None


def _version_key(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """initdb + pg_ctl start; `stop()` removes everything."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="spotwise-pg-"))
        self.data = self.dir / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no 'postgres' user") from None
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://spotwise@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        r = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=120, cwd=self.dir
        )
        if r.returncode != 0:
            log = self.dir / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{Path(args[0]).name} failed: {r.stderr.strip()}\n{tail}")

    def start(self) -> Cluster:
        self._run(
            str(self.bindir / "initdb"),
            "-D", str(self.data), "-U", "spotwise", "-A", "trust", "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.dir / "server.log"), "-w", "-t", "60", "start",
        )  # fmt: skip
        return self

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
