"""What `spotwise bench daemon` measures: the real controllers over the in-memory cloud, at scale.

Measures what an operator pays for the daemon itself: CPU per reconcile pass (and per job)
for the pass that launches every pending job and for a steady pass, the `status -o json`
read, and the idle daemon's CPU and memory over a history of finished jobs. Same code and
the default configuration the daemon runs; no warm caches (each size starts from an empty
database). The targets it was built to meet are printed next to each figure (the table is
scheduler/cli/bench.py's).
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from providers.base import EndReason, Market, Offering
from providers.fake import FakeCloud
from scheduler.core.clock import SimClock
from scheduler.core.config import Config, DaemonSettings
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.daemon.reconcile import Reconciler
from scheduler.state import read_models
from scheduler.state.db import open_db, open_existing
from scheduler.state.desired import new_job_id
from scheduler.state.models import Attempt, Job, SpendBucket

T0 = datetime(2026, 6, 1, tzinfo=UTC)
SPEC = json.dumps({"name": "bench", "team": "default", "command": ["train"], "gpus": ["V100:1"]})


def _offerings() -> list[Offering]:
    out = []
    for i, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")):
        for market, price in ((Market.SPOT, 0.9 + 0.1 * i), (Market.ON_DEMAND, 3.06)):
            out.append(
                Offering(
                    "aws", "us-east-1", zone, "p3.2xlarge", "V100", 1, 16, 8, 61, market, price, T0
                )
            )
    return out


def insert_jobs(engine: sa.Engine, n: int, *, finished: bool, now: datetime, stores: Path) -> None:
    """Bulk rows, as a long-lived database would hold them (finished: one attempt each).
    Checkpoint stores live under `stores` (the run's temporary directory)."""
    jobs, attempts, buckets = [], [], []
    for _ in range(n):
        jid = new_job_id()
        jobs.append(
            {
                "id": jid,
                "name": "bench",
                "team": "default",
                "spec_json": SPEC,
                "state": (JobState.SUCCEEDED if finished else JobState.PENDING).value,
                "reason": "",
                "checkpoint_uri": (stores / jid).as_uri(),
                "created_at": now,
                "updated_at": now,
                "cancel_requested": False,
                "attempts": 1 if finished else 0,
                "recoveries": 0,
                "failures": 0,
                "step_failures": 0,
                "last_error": "",
                "cost_usd": 0.9 if finished else 0.0,
                "settled_attempt": f"{jid}-a1" if finished else None,
            }
        )
        if finished:
            start = now - timedelta(hours=2)
            attempts.append(
                {
                    "id": f"{jid}-a1",
                    "job_id": jid,
                    "number": 1,
                    "token": f"bench-{jid}-a1",
                    "provider": "fake",
                    "cloud": "aws",
                    "region": "us-east-1",
                    "zone": "us-east-1a",
                    "instance_type": "p3.2xlarge",
                    "market": "spot",
                    "pool": "aws/us-east-1a/p3.2xlarge/spot",
                    "price_per_hour": 0.9,
                    "billed_price": 0.9,
                    "gpu_count": 1,
                    "state": AttemptState.ENDED.value,
                    "instance_id": f"i-{jid}",
                    "instance_scope": "",
                    "created_at": start,
                    "started_at": start,
                    "accrued_until": start + timedelta(hours=1),
                    "ended_at": start + timedelta(hours=1),
                    "end_reason": AttemptEnd.FINISHED.value,
                    "detail": "",
                    "cost_usd": 0.9,
                }
            )
            buckets.append(
                {
                    "hour": start.replace(minute=0, second=0, microsecond=0),
                    "attempt_id": f"{jid}-a1",
                    "job_id": jid,
                    "job_name": "bench",
                    "team": "default",
                    "cloud": "aws",
                    "usd": 0.9,
                }
            )
    if not jobs:
        return
    with engine.begin() as c:
        c.execute(sa.insert(_table(Job)), jobs)
        if attempts:
            c.execute(sa.insert(_table(Attempt)), attempts)
            c.execute(sa.insert(_table(SpendBucket)), buckets)


def _table(model: type) -> sa.Table:
    table: sa.Table = model.__table__  # type: ignore[attr-defined]
    return table


@dataclass
class Row:
    jobs: int
    history: int
    launch_pass_cpu_s: float
    launch_per_job_ms: float
    steady_pass_cpu_s: float
    steady_per_job_ms: float
    accrue_cpu_s: float
    status_ms: float
    status_cpu_ms: float
    status_cli_ms: float
    end_pass_cpu_s: float
    idle_cpu_pct: float
    rss_mb: float


def _cpu() -> float:
    return time.process_time()


def _rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_json(engine: sa.Engine) -> str:
    """What `status -o json` writes (and what older versions did: the bench runs on them)."""
    if hasattr(read_models, "job_rows_json"):
        rows: Any = read_models.job_rows_json(engine)
    else:
        try:
            rows = read_models.job_rows(engine, iso_times=True)
        except TypeError:  # older versions: rows held datetimes
            rows = read_models.job_rows(engine)
    document = read_models.document(jobs=rows, daemon_warning=None)
    dumps = getattr(read_models, "dumps_document", None)  # absent before 0.3: what the CLI did then
    if dumps is None:
        return json.dumps(document, indent=2, default=read_models.json_default)
    return str(dumps(document))


def measure(jobs: int, history: int, idle_seconds: float, workdir: Path, cli_runs: int = 3) -> Row:
    db = workdir / f"bench-{jobs}-{history}.db"
    engine = open_db(f"sqlite:///{db}")
    clock = SimClock(T0)
    cloud = FakeCloud(_offerings(), clock=clock, start_running=True)
    config = Config(daemon=DaemonSettings(database_url=f"sqlite:///{db}", state_dir=workdir))
    rec = Reconciler(engine, config, {"fake": cloud}, clock)
    rec.poll_prices()
    insert_jobs(engine, history, finished=True, now=clock.now(), stores=workdir / "stores")
    insert_jobs(engine, jobs, finished=False, now=clock.now(), stores=workdir / "stores")
    clock.advance(5)
    t = _cpu()
    rec.reconcile()  # places and launches every pending job
    launch = _cpu() - t
    clock.advance(5)
    t = _cpu()
    rec.reconcile()  # steady: everything runs
    steady = _cpu() - t
    clock.advance(30)
    t = _cpu()
    rec.accrue()
    accrue = _cpu() - t
    # `status -o json` runs in its own small process, not in the daemon's large heap (whose
    # garbage collections would be charged to it): timed there, imports excluded, and as a
    # whole new process, interpreter start and imports included.
    status_ms, status_cpu_ms = _status_in_fresh_process(db, jobs + history)
    status_cli_ms = _status_cli_ms(db, workdir, cli_runs)
    # Every instance ends at once (a fleet finishing, or a zone reclaimed): one pass bills them all.
    for inst in cloud.running():
        cloud.end(inst.id, EndReason.EXITED, exit_code=0)
    clock.advance(5)
    t = _cpu()
    rec.reconcile()
    end_pass = _cpu() - t
    rec.accrue()
    # Idle: everything finished, the daemon keeps its default schedule for a while.
    d = config.daemon
    start_wall, start_cpu = time.monotonic(), _cpu()
    next_at = {"reconcile": 0.0, "accrue": 0.0, "poll_prices": 0.0}
    every = {
        "reconcile": d.reconcile_interval.total_seconds(),
        "accrue": d.accrue_interval.total_seconds(),
        "poll_prices": d.price_interval.total_seconds(),
    }
    while (elapsed := time.monotonic() - start_wall) < idle_seconds:
        for task, due in next_at.items():
            if elapsed >= due:
                getattr(rec, task)()
                next_at[task] = due + every[task]
        time.sleep(max(0.0, min(next_at.values()) - (time.monotonic() - start_wall)))
    idle_pct = 100.0 * (_cpu() - start_cpu) / max(idle_seconds, 1e-9)
    rss = _rss_mb()
    engine.dispose()
    return Row(
        jobs,
        history,
        round(launch, 3),
        round(1000 * launch / jobs, 3),
        round(steady, 3),
        round(1000 * steady / jobs, 3),
        round(accrue, 3),
        round(status_ms, 1),
        round(status_cpu_ms, 1),
        round(status_cli_ms, 1),
        round(end_pass, 3),
        round(idle_pct, 2),
        round(rss, 1),
    )


def _status_cli_ms(db: Path, workdir: Path, runs: int = 3) -> float:
    """`spotwise status -o json` as a person runs it, a new process each time (interpreter
    start and imports included): the median wall time of `runs`."""
    cfg = workdir / "bench-status.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{workdir}"\ndatabase_url = "sqlite:///{db}"\n')
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "scheduler", "status", "-o", "json", "-c", str(cfg)],
            capture_output=True,
            timeout=300,
        )
        times.append((time.perf_counter() - t) * 1000)
        if proc.returncode not in (0, 3):  # 3: no daemon heartbeat, expected here
            raise RuntimeError(f"status failed: {proc.stderr.decode()[-500:]}")
    return statistics.median(times)


def status_probe(db: str, expect: str) -> None:
    """Child of `_status_in_fresh_process`: what the CLI does for `status -o json`, timed
    after the imports, printed as JSON."""
    engine = open_existing(f"sqlite:///{db}")
    t, c = time.perf_counter(), _cpu()
    doc = _status_json(engine)
    wall, cpu = (time.perf_counter() - t) * 1000, (_cpu() - c) * 1000
    assert len(json.loads(doc)["jobs"]) == int(expect)
    sys.stdout.write(json.dumps({"ms": wall, "cpu_ms": cpu}) + "\n")


def _status_in_fresh_process(db: Path, expect: int) -> tuple[float, float]:
    code = "import sys; from scheduler.lab.bench_daemon import status_probe as p; p(*sys.argv[1:])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(db), str(expect)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"status probe failed: {proc.stderr[-500:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["ms"]), float(out["cpu_ms"])


def run(
    sizes: list[int], histories: list[int], idle_seconds: float, cli_runs: int = 3
) -> list[Row]:
    """Each size in a new process: one size's heap (and the memory Python keeps after it)
    must not weigh on the next one's CPU or RSS, as separate daemons would not."""
    rows = []
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="spotwise-bench-daemon-") as tmp:
        for history in histories:
            for n in sizes:
                with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
                    job = pool.submit(measure, n, history, idle_seconds, Path(tmp), cli_runs)
                    rows.append(job.result())
    return rows


def verdicts(rows: list[Row]) -> list[str]:
    """The targets the daemon was built to meet, against this run's figures."""
    out = []
    by = {(r.jobs, r.history): r for r in rows}
    small, big = min(r.jobs for r in rows), max(r.jobs for r in rows)
    for h in sorted({r.history for r in rows}):
        a, b = by.get((small, h)), by.get((big, h))
        if a and b and a is not b:
            ratio = b.launch_per_job_ms / max(a.launch_per_job_ms, 1e-9)
            out.append(
                f"history {h}: per-job launch-pass cost at {big} is {ratio:.2f}x that at "
                f"{small} (target <= 2x): {'met' if ratio <= 2 else 'NOT met'}"
            )
        if b:
            fast = "met" if b.launch_pass_cpu_s < 10 else "NOT met"
            out.append(
                f"history {h}: launch pass of {big} jobs {b.launch_pass_cpu_s:.2f} CPU-s "
                f"(target < 10 s at 10,000): {fast}"
            )
            quick = "met" if b.status_ms < 300 else "NOT met"
            out.append(
                f"history {h}: status -o json over {big + h} jobs {b.status_ms:.0f} ms "
                f"({b.status_cpu_ms:.0f} ms CPU; target < 300 ms at 10,000): {quick}"
            )
            out.append(
                f"history {h}: `spotwise status -o json` as a new process "
                f"{b.status_cli_ms:.0f} ms (interpreter start and imports included)"
            )
        if a:
            # The idle target is about history ("with 10,000 finished jobs"), so it is read
            # where the fewest jobs are active; the other rows' idle figures are in the table.
            idle = "met" if a.idle_cpu_pct < 1 and a.rss_mb < 150 else "NOT met"
            out.append(
                f"history {h}: idle with {small} active jobs {a.idle_cpu_pct:.2f}% of a core, "
                f"{a.rss_mb:.0f} MB (target < 1%, < 150 MB with 10,000 finished): {idle}"
            )
    return out
