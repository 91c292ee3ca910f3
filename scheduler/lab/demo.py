"""`spotwise demo`: the whole system on the local market, start to finish, in a minute or two.

It writes a config, starts the real daemon as a subprocess, submits real jobs (the bundled
trainer), shows the status table live and ends with each job's attempts, interruptions, cost
and saving versus on-demand. The trace window is chosen so the cheapest spot pool for the first
job loses capacity shortly after launch: the interruption comes from the real trace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from sqlmodel import Session, col, select

from providers.base import Market
from providers.local.market import LocalMarket, suggest_trace_start
from providers.local.settings import LocalSettings
from scheduler.core.catalog import Catalog
from scheduler.core.config import Config, parse_config
from scheduler.core.jobspec import JobSpec, jobspec_from_dict
from scheduler.core.placement import PlacementContext, Requirements, place
from scheduler.core.states import AttemptEnd, JobState
from scheduler.daemon.wiring import clock_for
from scheduler.state.db import open_db
from scheduler.state.desired import cancel, submit
from scheduler.state.models import Attempt, Job
from scheduler.state.read_models import job_rows

# Generous: on a loaded machine every attempt's start (importing torch) is slower, so the job
# lives longer in market time and meets more of the trace's interruptions.
TIME_LIMIT_S = 220.0


@dataclass(frozen=True)
class DemoPlan:
    config_text: str
    jobs: list[JobSpec]
    interrupted_pool: str
    budget_limit: float


def _trainer_job(name: str, gpus: str, steps: int, pace: float = 0.0, **extra: object) -> JobSpec:
    command = [
        sys.executable, "-m", "trainer", "--config", "tiny",  # the trainer's bundled config
        "--training.steps", str(steps), "--training.step_delay_seconds", str(pace),
    ]  # fmt: skip
    return jobspec_from_dict({"name": name, "command": command, "gpus": gpus, **extra}, name)


def _config_text(workdir: Path, speedup: float, trace_start_s: float, budget: float) -> str:
    # Durations are in market time: at speedup 120, "2m" is one real second. stop_grace (6 real
    # seconds) covers kill_after (5): a stopped job is gone, SIGKILLed at the latest, before the
    # hard budget's margin is used up.
    return f"""\
[daemon]
state_dir = "{workdir}"
database_url = "sqlite:///{workdir}/spotwise.db"
checkpoint_root = "{(workdir / "checkpoints").as_uri()}"
reconcile_interval = "{speedup:g}s"
price_interval = "{2 * speedup:g}s"
accrue_interval = "{2 * speedup:g}s"
unavailable_ttl = "30m"
avoid_after_interrupt = "2h"
stop_grace = "{6 * speedup:g}s"
leak_grace = "30m"

[providers.local]
state_dir = "{workdir}/market"
speedup = {speedup:g}
trace_start = "{trace_start_s:.0f}s"
grace_period = "3s"
kill_after = "5s"

[[budgets]]
name = "research"
scope = "team:research"
limit_usd = {budget:.4f}
window = "total"
hard = true

[[budgets]]
name = "everything"
scope = "global"
limit_usd = 100
window = "month"
hard = false
"""


def _cheapest_pool(market: LocalMarket, spec: JobSpec) -> tuple[str, float]:
    offers = market.offerings()
    d = place(
        Requirements.from_spec(spec), Catalog(offers), PlacementContext(now=offers[0].seen_at)
    )
    if d.offering is None:
        raise RuntimeError(f"demo: {d.reason}")
    return d.offering.pool, d.offering.price_per_hour


def plan_demo(workdir: Path, speedup: float) -> DemoPlan:
    """Pick a trace window where job 1's cheapest spot pool is lost ~25 s (real) after launch."""
    # One torch thread per job: two trainers and the daemon share this machine's cores.
    env = {"OMP_NUM_THREADS": "1"}
    # Paced (0.1 s a step) so the planned interruption lands mid-run however fast this box is.
    job1 = _trainer_job("train-v100", "V100:1", steps=240, env=env, pace=0.1)
    job2 = _trainer_job("finetune-t4", "T4:1", steps=100000, team="research", spot="never", env=env)
    job3 = _trainer_job("pretrain-8xh100", "H100:8", steps=1000, max_price_per_hour=5.0, env=env)
    lead = timedelta(seconds=15 * speedup)
    probe = workdir / "probe"

    def cheapest_at(offset: timedelta) -> str:
        settings = LocalSettings(state_dir=probe, speedup=speedup, trace_start=offset)
        return _cheapest_pool(LocalMarket(settings), job1)[0]

    # The job launches a few real seconds after the market starts, so the pool must stay the
    # cheapest for the first ticks, then lose capacity `lead` later.
    tick = timedelta(seconds=LocalMarket(LocalSettings(state_dir=probe)).trace.gap_seconds)
    start = timedelta(0)
    pool = cheapest_at(start)
    for _ in range(40):
        start = suggest_trace_start(pool, lead, after=start)
        here = [cheapest_at(start + k * tick) for k in range(4)]
        if all(p == pool for p in here):
            break
        pool = here[0]
        start += tick
    market = LocalMarket(LocalSettings(state_dir=probe, speedup=speedup, trace_start=start))
    _, t4_price = _cheapest_pool(market, job2)
    # The research budget buys about 30 real seconds of the T4 job, then binds.
    budget = t4_price * (30 * speedup / 3600)
    return DemoPlan(
        _config_text(workdir, speedup, start.total_seconds(), budget),
        [job1, job2, job3],
        pool,
        budget,
    )


def _ondemand_prices(config: Config) -> dict[tuple[str, str], float]:
    market = LocalMarket(config.providers.local)
    return {
        (o.zone, o.instance_type): o.price_per_hour
        for o in market.offerings()
        if o.market is Market.ON_DEMAND
    }


def _plain_table(title: str) -> Table:
    """`status`'s look: no box, so eight columns still fit an 80-column terminal."""
    return Table(
        title=title,
        title_justify="left",
        box=None,
        header_style="bold",
        pad_edge=False,
        padding=(0, 1),
    )


def percent_saved(paid: float, ondemand: float) -> str:
    """Whole percent saved against on-demand; a job that paid a hair more prints "0%", not
    "-0%" (a real overrun of half a percent or more still prints negative)."""
    return f"{round(100 * (1 - paid / ondemand))}%"


def summary_table(engine, config: Config) -> tuple[Table, list[str], float, float]:
    """Each job's attempts, interruptions, cost and the cost of the same hours on-demand, and
    each job's path through the pools (one line per job: a path does not fit in a column)."""
    od = _ondemand_prices(config)
    t = _plain_table("what it cost")
    for c in ("JOB", "STATE", "ATTEMPTS", "INTERRUPTED", "PAID", "ON-DEMAND", "SAVED"):
        right = c not in ("JOB", "STATE")
        t.add_column(c, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")
    paths: list[str] = []
    total_paid = total_od = 0.0
    with Session(engine) as s:
        for job in s.exec(select(Job).order_by(col(Job.created_at))).all():
            attempts = s.exec(
                select(Attempt).where(Attempt.job_id == job.id).order_by(col(Attempt.number))
            ).all()
            paid = sum(a.cost_usd for a in attempts)
            ondemand = 0.0
            for a in attempts:
                if a.started_at and a.price_per_hour:
                    ondemand += a.cost_usd / a.price_per_hour * od.get((a.zone, a.instance_type), 0)
            interrupted = sum(1 for a in attempts if a.end_reason is AttemptEnd.INTERRUPTED)
            ran = [f"{a.zone}/{a.market}" for a in attempts if a.started_at is not None]
            if ran:
                paths.append(f"{job.name}: {' -> '.join(ran)}")
            saved = percent_saved(paid, ondemand) if ondemand else "-"
            total_paid += paid
            total_od += ondemand
            t.add_row(
                job.name,
                job.state.value,
                str(len(attempts)),
                str(interrupted),
                f"${paid:.3f}",
                f"${ondemand:.3f}",
                saved,
            )
    return t, paths, total_paid, total_od


def run_demo(workdir: Path | None, speedup: float, console: Console) -> int:
    started = time.monotonic()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="spotwise-demo-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]spotwise demo[/] on the local market (state in {workdir})")
    plan = plan_demo(workdir, speedup)
    cfg_path = workdir / "spotwise.toml"
    cfg_path.write_text(plan.config_text)
    config = parse_config(plan.config_text, str(cfg_path))
    console.print(
        f"trace window chosen so [magenta]{plan.interrupted_pool}[/] loses spot capacity soon; "
        f"team 'research' has a hard budget of ${plan.budget_limit:.3f}; speed-up {speedup:g}x"
    )
    engine = open_db(config.daemon.resolved_database_url())
    log = (workdir / "daemon.log").open("w")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "daemon", "--config", str(cfg_path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    clock = clock_for(config)
    ids = [
        submit(engine, spec, clock.now(), config.daemon.resolved_checkpoint_root()).id
        for spec in plan.jobs
    ]
    capped = ids[2]
    try:
        _watch(engine, ids, capped, daemon, console, started)
        cancel(engine, capped, clock.now())
        _wait(engine, [capped], lambda st: st.terminal, timeout=20)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    table, paths, paid, ondemand = summary_table(engine, config)
    console.print()
    console.print(table)
    for path in paths:
        console.print(path, highlight=False)
    if ondemand:
        console.print(
            f"total paid [bold]${paid:.3f}[/] vs [bold]${ondemand:.3f}[/] on-demand for the same "
            f"hours: [bold green]{percent_saved(paid, ondemand)} saved[/]"
        )
    console.print(f"demo finished in {time.monotonic() - started:.0f} s; inspect it with:")
    for command in hint_commands(cfg_path, [spec.name for spec in plan.jobs]):
        # soft_wrap: a long path stays one line, so it can be copied whole.
        console.print(f"  {command}", soft_wrap=True, highlight=False, markup=False)
    with Session(engine) as s:
        states = {j.name: j.state for j in s.exec(select(Job)).all()}
    ok = (
        states.get("train-v100") is JobState.SUCCEEDED
        and states.get("finetune-t4") is JobState.HELD
    )
    return 0 if ok else 1


def program() -> str:
    """How to run spotwise as this demo was run, so its hints work when pasted: `./dev`
    when ./dev started it (it says so in $SPOTWISE_PROG), `spotwise` when that is on the
    PATH, else this Python's `-m scheduler`."""
    import shlex
    import shutil

    given = os.environ.get("SPOTWISE_PROG", "").strip()
    if given:
        return given
    if shutil.which("spotwise"):
        return "spotwise"
    return f"{shlex.quote(sys.executable)} -m scheduler"


def hint_commands(cfg_path: Path, job_names: list[str]) -> list[str]:
    """The commands the demo's last lines suggest, runnable as printed (real job names,
    not placeholders; the program as it was started)."""
    import shlex

    prog, cfg = program(), shlex.quote(str(cfg_path))
    first = job_names[0] if job_names else "JOB"
    return [
        f"{prog} status --all -c {cfg}",
        f"{prog} show {shlex.quote(first)} -c {cfg}",
        f"{prog} logs {shlex.quote(first)} -c {cfg}",
        f"{prog} events --job {shlex.quote(first)} -c {cfg}",
    ]


def _done_or_held(state: JobState) -> bool:
    return state.terminal or state is JobState.HELD


def _watch(engine, ids, capped, daemon, console: Console, started: float) -> None:
    """Live status until every placeable job has finished or is held, or the time limit."""
    with Live(console=console, refresh_per_second=2) as live:
        while time.monotonic() - started < TIME_LIMIT_S:
            rows = job_rows(engine)
            live.update(Group(_live_table(rows), Text(f"{time.monotonic() - started:.0f} s")))
            states = {r["id"]: JobState(r["state"]) for r in rows}
            if all(_done_or_held(states[i]) for i in ids if i != capped):
                return
            if daemon.poll() is not None:
                raise RuntimeError("the daemon exited; see daemon.log in the demo directory")
            time.sleep(0.5)


def _wait(engine, ids, pred, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with Session(engine) as s:
            jobs = [s.get(Job, i) for i in ids]
            if all(j is not None and pred(j.state) for j in jobs):
                return
        time.sleep(0.3)


def _live_table(rows) -> Table:
    t = _plain_table("spotwise status (live)")
    # A running job's REASON names its pool and price ("on aws/us-east-1a/... at $3.06/h"), so
    # no WHERE or $/H column: REASON gets what is left and folds; the rest never wrap.
    for c in ("NAME", "STATE", "SPENT", "STEP", "RECOV", "REASON"):
        fold = c == "REASON"
        t.add_column(
            c,
            no_wrap=not fold,
            overflow="fold" if fold else "ellipsis",
            ratio=1 if fold else None,
            min_width=12 if fold else None,
        )
    for r in rows:
        step = f"{r['progress_step']}/{r['total_steps']}" if r["total_steps"] else "-"
        t.add_row(
            r["name"],
            r["state"],
            f"${r['cost_usd']:.3f}",
            step,
            str(r["recoveries"]),
            r["reason"],
        )
    return t
