"""`spotwise bench cli`: how long the command line takes to answer, as a person runs it.

People and scripts run `spotwise status` many times a minute, so what a command costs is mostly
what it costs to start: the interpreter, the imports, opening the database. Each case here is a
new process (the installed `spotwise` console script), timed from start to exit. Cases run
round by round, one of each per round, beside bare `python -c pass` measured in the same run:
a busy machine shows as a slower baseline too, not as a slower command line.

The databases are built in a temporary directory: a small one (jobs in every state, one with
attempts and events for `show`) and a large one (10,000 jobs by default). A daemon's heartbeat
is renewed before every round, as a running daemon keeps it, so `status` takes the path it
takes on a healthy install.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

LARGE_JOBS = 10_000


@dataclass(frozen=True, slots=True)
class Case:
    """One command line: `args` after the program (None: bare `python -c pass`), the
    database it reads ("small", "large" or None) and the target it was built to meet: at most
    `target_ms` in all, or `over_bare_ms` more than bare Python."""

    name: str
    args: tuple[str, ...] | None
    database: str | None = None
    target_ms: float | None = None
    over_bare_ms: float | None = None


BARE = "python -c pass"
CASES = (
    Case(BARE, None),
    Case("--version", ("--version",), over_bare_ms=100),
    Case("--help", ("--help",), over_bare_ms=100),
    Case("status", ("status",), "small", target_ms=250),
    Case("show JOB", ("show", "{job}"), "small", target_ms=250),
    Case("status -o json", ("status", "-o", "json"), "small"),
    Case("status -o json, large", ("status", "-o", "json"), "large", target_ms=300),
)


@dataclass(frozen=True, slots=True)
class Database:
    config: Path
    job: str  # a job with attempts and events, for `show`


def command_line() -> list[str]:
    """The `spotwise` console script installed beside this interpreter (what people run),
    else `python -m scheduler`."""
    script = Path(sys.executable).with_name("spotwise")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "scheduler"]


def build_database(workdir: Path, name: str, jobs: int) -> Database:
    """A daemon's database with `jobs` jobs (half finished, with an attempt and spend each;
    half pending), one job with three attempts and a dozen events, and a config that finds
    it. Built the way the daemon builds one (migrations included)."""
    from sqlmodel import Session

    from scheduler.lab.bench_daemon import T0, insert_jobs
    from scheduler.state.audit import emit
    from scheduler.state.db import open_db
    from scheduler.state.models import Attempt, Job

    state = workdir / name
    db = state / "spotwise.db"
    engine = open_db(f"sqlite:///{db}")
    now = datetime.now(UTC)
    stores = workdir / "stores"
    insert_jobs(engine, jobs // 2, finished=True, now=now, stores=stores)
    insert_jobs(engine, jobs - jobs // 2 - 1, finished=False, now=now, stores=stores)
    insert_jobs(engine, 1, finished=True, now=now, stores=stores)
    with Session(engine) as s:
        job = s.exec(_newest_finished(Job)).first()
        assert job is not None
        first = s.get(Attempt, f"{job.id}-a1")
        assert first is not None
        for number in (2, 3):  # two more attempts: interrupted, then finished
            data = first.model_dump()
            data.update(id=f"{job.id}-a{number}", number=number, token=f"{first.token}-{number}")
            s.add(Attempt(**data))
        job.attempts = 3
        s.add(job)
        for i in range(12):
            emit(s, T0 + timedelta(minutes=i), "placed", f"event {i} of {job.id}", job_id=job.id)
        s.commit()
        job_id = job.id
    engine.dispose()
    config = workdir / f"{name}.toml"
    config.write_text(
        f'[daemon]\nstate_dir = "{state}"\ndatabase_url = "sqlite:///{db}"\n\n[providers.local]\n'
    )
    return Database(config, job_id)


def _newest_finished(job: Any) -> Any:
    from sqlmodel import col, select

    return select(job).where(job.state == "SUCCEEDED").order_by(col(job.id)).limit(1)


class Heartbeat:
    """The daemon's heartbeat row in each database, renewed before every round, with the
    record of the config it runs with, as a daemon started with that file writes it (so the
    read commands find what they find on a healthy install)."""

    def __init__(self, configs: list[Path]) -> None:
        from scheduler.state.db import open_existing
        from scheduler.state.files import load_config_source
        from scheduler.state.installed import version
        from scheduler.state.lease import DaemonRecord
        from scheduler.state.running_config import record

        self.records = []
        for path in configs:
            config, digest = load_config_source(path)
            url = config.daemon.resolved_database_url()
            held = DaemonRecord(open_existing(url), stale_after=timedelta(minutes=1))
            held.claim(version(), record(config, path, digest))
            self.records.append(held)

    def beat(self) -> None:
        for record in self.records:
            record.beat("benchmark")

    def close(self) -> None:
        for record in self.records:
            record.engine.dispose()


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from start to exit of one process, and the CPU seconds it used (user and
    system: what a busy machine changes least). A command that fails is an error (exit 3, a
    stale daemon, is not: the figures would still be the command's)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=300)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 3):
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode()[-500:]}")
    return took, _children_cpu() - cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (p in 0..100) of `values`."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def run(
    runs: int = 20,
    large_jobs: int = LARGE_JOBS,
    progress: Any = None,
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every case (or those named in `only`, and bare Python) `runs` times, one of each per
    round; the figures as a document."""
    say = progress or (lambda _msg: None)
    program = command_line()
    cases = [c for c in CASES if only is None or c.name in only or c.args is None]
    times: dict[str, list[float]] = {c.name: [] for c in cases}
    cpu: dict[str, list[float]] = {c.name: [] for c in cases}
    with tempfile.TemporaryDirectory(prefix="spotwise-bench-cli-") as tmp:
        work = Path(tmp)
        databases: dict[str, Database] = {}
        for name, jobs in (("small", 6), ("large", large_jobs)):
            if any(c.database == name for c in cases):
                say(f"building a database of {jobs} jobs ...")
                databases[name] = build_database(work, name, jobs)
        # No config of the caller's may leak in: each case names its own file.
        env = {k: v for k, v in os.environ.items() if k != "SPOTWISE_CONFIG"}
        env.update(COLUMNS="80", XDG_STATE_HOME=str(work / "xdg"))
        heartbeat = Heartbeat([d.config for d in databases.values()])
        try:
            for round_ in range(runs):
                heartbeat.beat()
                for case in cases:
                    took, used = time_once(_argv(case, program, databases), env)
                    times[case.name].append(took)
                    cpu[case.name].append(used)
                say(f"[{round_ + 1}/{runs}] rounds")
        finally:
            heartbeat.close()
    bare = statistics.median(times[BARE])
    rows = []
    for case in cases:
        median = statistics.median(times[case.name])
        rows.append(
            {
                "case": case.name,
                "args": None if case.args is None else list(case.args),
                "database": case.database,
                "median_ms": _ms(median),
                "p90_ms": _ms(percentile(times[case.name], 90)),
                "min_ms": _ms(min(times[case.name])),
                "cpu_ms": _ms(statistics.median(cpu[case.name])),
                "over_bare_ms": None if case.args is None else _ms(median - bare),
                "target_ms": case.target_ms,
                "target_over_bare_ms": case.over_bare_ms,
                "met": _met(case, median, bare),
            }
        )
    return {
        "benchmark": "cli",
        "runs": runs,
        "large_jobs": large_jobs,
        "program": program,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cases": rows,
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _argv(case: Case, program: list[str], databases: dict[str, Database]) -> list[str]:
    if case.args is None:
        return [sys.executable, "-c", "pass"]
    db = databases[case.database] if case.database else None
    args = [a.format(job=db.job if db else "") for a in case.args]
    return [*program, *args, *(["-c", str(db.config)] if db else [])]


def _met(case: Case, median: float, bare: float) -> bool | None:
    if case.target_ms is not None:
        return median * 1000 <= case.target_ms
    if case.over_bare_ms is not None:
        return (median - bare) * 1000 <= case.over_bare_ms
    return None
