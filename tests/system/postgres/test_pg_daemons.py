"""Two real daemon processes on one PostgreSQL database and one local market.

kill -9 of the holder: the standby takes over once the lease has expired by the server's
clock, never before. SIGSTOP of the holder: the same; on SIGCONT the old holder finds its
lease gone, writes and launches nothing, and exits 75 to come back as a standby. Across
both handovers no job ever has two live instances, and every job keeps its one attempt.
Takeover times are printed (pytest -s) for the README's note; a takeover that does not
come prints the server's sessions and both daemons' logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from scheduler.core.jobspec import jobspec_from_dict
from scheduler.state.db import open_db
from scheduler.state.desired import submit

COUNTER = Path(__file__).parents[2] / "support" / "jobs" / "counter.py"
TTL, RENEW, DEADLINE, STATEMENT = 3.0, 0.5, 2.0, 0.4
pytestmark = pytest.mark.timeout(240)


def _config(home: Path, name: str, url: str) -> Path:
    path = home / f"{name}.toml"
    path.write_text(
        f"""
[daemon]
state_dir = "{home / name}"
database_url = "{url}"
checkpoint_root = "{(home / "ckpt").as_uri()}"
reconcile_interval = "0.3s"
price_interval = "1s"
accrue_interval = "0.5s"
leak_grace = "1h"
lease_ttl = "{TTL}s"
lease_renew = "{RENEW}s"
lease_deadline = "{DEADLINE}s"
lease_statement_timeout = "{STATEMENT}s"

[providers.local]
state_dir = "{home / "market"}"
speedup = 1
grace_period = "0.3s"
kill_after = "3s"
"""
    )
    return path


class Replica:
    def __init__(self, home: Path, name: str, url: str) -> None:
        self.name = name
        self.config = _config(home, name, url)
        self.log_path = home / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Replica:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "daemon", "-c", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc is not None and self.proc.poll() is None, self.log()
            assert time.monotonic() < end, f"{self.name} never logged {text!r}:\n{self.log()}"
            time.sleep(0.1)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scheduler", *args, "-c", str(self.config)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def json(self, *args: str) -> dict:
        r = self.cli(*args, "-o", "json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                os.kill(self.proc.pid, sig)
            self.proc.wait(30)


class World:
    """Two replicas, the database they share, and a watch on the market's live instances."""

    def __init__(self, home: Path, url: str) -> None:
        self.home = home
        self.engine = open_db(url)  # the schema exists before either daemon starts
        self.a = Replica(home, "a", url)
        self.b = Replica(home, "b", url)
        self.max_live: Counter[str] = Counter()
        self._watching = threading.Event()
        self._watch = threading.Thread(target=self._sample, daemon=True)

    def holder(self) -> tuple[int, int] | None:
        with self.engine.connect() as c:
            row = c.execute(sa.text("SELECT pid, epoch FROM daemonlease")).first()
        return None if row is None else (int(row[0]), int(row[1]))

    def wait_holder(self, pid: int, timeout: float = 60) -> float:
        start = time.monotonic()
        while (h := self.holder()) is None or h[0] != pid:
            if time.monotonic() - start >= timeout:
                raise AssertionError(
                    f"pid {pid} never took the lease ({h}) in {timeout:g}s\n"
                    f"sessions:\n{self.sessions()}\n"
                    f"a:\n{self.a.log()[-4000:]}\nb:\n{self.b.log()[-4000:]}"
                )
            time.sleep(0.05)
        return time.monotonic() - start

    def renewed_at(self, pid: int) -> datetime:
        """The holder's last renewal by the server's clock, read once anything it had on the
        wire has landed (it was just stopped or killed; a standby cannot take over sooner)."""
        time.sleep(0.5)
        with self.engine.connect() as c:
            row = c.execute(sa.text("SELECT pid, renewed_at FROM daemonlease")).one()
        assert row[0] == pid, f"the lease moved within 0.5 s of stopping its holder: {row}"
        return row[1]

    def lease_age_at_takeover(self, renewed: datetime) -> float:
        """Seconds from the old holder's last renewal to the new term's start. The start is
        stamped as the takeover statement begins, before it waits (at most the statement
        timeout) for the row; the expiry is judged after: hence the slack in the caller."""
        with self.engine.connect() as c:
            start = c.execute(sa.text("SELECT started_at FROM daemonlease")).scalar_one()
        return (start - renewed).total_seconds()

    def sessions(self) -> str:
        """The server's view of every session on this database, for a failure message."""
        with self.engine.connect() as c:
            rows = c.execute(
                sa.text(
                    "SELECT pid, state, wait_event_type, wait_event, "
                    "now() - state_change AS for, left(query, 100) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).all()
        return "\n".join(" | ".join(str(v) for v in r) for r in rows)

    def live_by_job(self) -> Counter[str]:
        market = self.home / "market"
        out: Counter[str] = Counter()
        for marker in (market / "live").glob("*") if (market / "live").exists() else []:
            inst = market / "instances" / marker.name
            try:
                spec = json.loads((inst / "spec.json").read_text())
            except (OSError, ValueError):
                continue
            if not (inst / "end.json").exists():
                out[spec.get("tags", {}).get("spotwise-job", "?")] += 1
        return out

    def instances_by_job(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for spec in (self.home / "market" / "instances").glob("*/spec.json"):
            out[json.loads(spec.read_text()).get("tags", {}).get("spotwise-job", "?")] += 1
        return out

    def _sample(self) -> None:
        while not self._watching.is_set():
            for job, n in self.live_by_job().items():
                self.max_live[job] = max(self.max_live[job], n)
            time.sleep(0.05)

    def submit(self, name: str) -> str:
        """As `spotwise submit` does it (the CLI itself is tested in test_pg_schema)."""
        spec = jobspec_from_dict(
            {
                "name": name,
                "command": [sys.executable, str(COUNTER), "3000", "0.05"],
                "gpus": "V100:1",
                "gpu_hours": 1,
            }
        )
        ckpt = (self.home / "ckpt").as_uri()
        return submit(self.engine, spec, datetime.now(UTC), ckpt).id

    def states(self) -> dict[str, str]:
        with self.engine.connect() as c:
            return {str(i): str(s) for i, s in c.execute(sa.text("SELECT id, state FROM job"))}

    def wait_running(self, ids: list[str], timeout: float = 90) -> None:
        end = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < end:
            states = self.states()
            if all(states.get(i) == "RUNNING" for i in ids):
                return
            time.sleep(0.1)
        raise AssertionError(f"not all running: {states}\n{self.a.log()}\n{self.b.log()}")

    def attempts_by_job(self) -> Counter[str]:
        with self.engine.connect() as c:
            return Counter(
                str(j) for (j,) in c.execute(sa.text("SELECT job_id FROM attempt")).all()
            )

    def start_pair(self) -> None:
        self.a.start()
        self.wait_holder(self.a.pid)
        self.b.start()
        self.b.wait_log("standby: the lease is held by")
        self._watch.start()

    def close(self) -> None:
        self._watching.set()
        for r in (self.a, self.b):
            r.stop()
        _kill_market(self.home / "market")  # the market's jobs outlive the daemons: end them
        self.engine.dispose()


def _kill_market(market: Path) -> None:
    from providers.local import LocalMarket, LocalSettings

    if not market.exists():
        return
    from providers.base import ResourceRef

    m = LocalMarket(LocalSettings(state_dir=market, speedup=1))
    refs = [ResourceRef(p.name) for p in (market / "live").glob("*")]
    if refs:
        m.terminate(refs)


@pytest.fixture
def world(tmp_path, pg_url):
    w = World(tmp_path, pg_url)
    yield w
    w.close()


def _one_instance_each(w: World, ids: list[str]) -> None:
    assert all(w.max_live[i] == 1 for i in ids), w.max_live  # never two live at once
    made = w.instances_by_job()
    assert all(made[i] == 1 for i in ids), made  # and never a second launch at all
    assert all(w.attempts_by_job()[i] == 1 for i in ids), w.attempts_by_job()


def test_kill_9_of_the_holder_the_standby_takes_over_once_the_lease_expires(world):
    w = world
    w.start_pair()
    first_epoch = w.holder()[1]  # type: ignore[index]
    ids = [w.submit("one"), w.submit("two")]
    w.wait_running(ids)
    os.kill(w.a.pid, signal.SIGKILL)
    renewed = w.renewed_at(w.a.pid)
    took = 0.5 + w.wait_holder(w.b.pid)
    print(f"\ntakeover after kill -9: {took:.2f}s (lease_ttl {TTL:g}s, renew {RENEW:g}s)")
    assert w.lease_age_at_takeover(renewed) >= TTL - STATEMENT  # never while it was live
    assert w.holder() == (w.b.pid, first_epoch + 1)
    w.b.wait_log("holding the lease")
    third = w.submit("three")  # the new holder places new work
    w.wait_running([*ids, third])
    _one_instance_each(w, [*ids, third])
    doc = w.b.json("status")
    assert doc["daemon"]["pid"] == w.b.pid and doc["daemon"]["epoch"] == first_epoch + 1
    text = w.b.cli("status")
    assert f"daemon: pid {w.b.pid} on " in text.stderr and "holds the lease since" in text.stderr


def test_a_paused_holder_is_fenced_after_takeover_and_launches_nothing(world):
    w = world
    w.start_pair()
    first_epoch = w.holder()[1]  # type: ignore[index]
    ids = [w.submit("one"), w.submit("two")]
    w.wait_running(ids)
    os.kill(w.a.pid, signal.SIGSTOP)
    renewed = w.renewed_at(w.a.pid)
    took = 0.5 + w.wait_holder(w.b.pid)
    print(f"\ntakeover after SIGSTOP: {took:.2f}s (lease_ttl {TTL:g}s, renew {RENEW:g}s)")
    assert w.lease_age_at_takeover(renewed) >= TTL - STATEMENT  # never while it was live
    w.b.wait_log("holding the lease")
    third = w.submit("three")  # work the paused holder would have placed, had it been awake
    w.wait_running([*ids, third])
    os.kill(w.a.pid, signal.SIGCONT)
    assert w.a.proc is not None
    rc = w.a.proc.wait(30)
    log = w.a.log()
    assert rc == 75, log
    assert "lease lost" in log and "exiting (75) after losing the lease" in log
    print(f"old holder after SIGCONT: {log.count('write rejected')} write(s) rejected")
    assert w.holder() == (w.b.pid, first_epoch + 1)  # still the new holder's, same epoch
    time.sleep(1)  # a few of the new holder's passes, for the watch to see any double
    _one_instance_each(w, [*ids, third])
