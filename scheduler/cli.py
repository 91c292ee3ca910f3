"""The `spotwise` command line (Typer + Rich). Every read command takes `-o json`."""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from scheduler import views
from scheduler.adapters import clock_for
from scheduler.config import load_config
from scheduler.db import open_existing, redact_url
from scheduler.errors import UserError
from scheduler.jobspec import load_jobspec

app = typer.Typer(
    name="spotwise",
    help="Cost-aware Spot GPU scheduler: live prices, budgets, interruption-safe jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
if not out.is_terminal:  # piped or captured: wide enough that tables do not fold
    out = Console(width=200)
err = Console(stderr=True)


class Output(StrEnum):
    table = "table"
    json = "json"


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Config file (else $SPOTWISE_CONFIG, ...)")
]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json")]


def _engine(config: Path | None):
    """The daemon's database as the daemon finds it (same config, same state_dir)."""
    cfg = load_config(config)
    return cfg, open_existing(cfg.daemon.resolved_database_url())


def _daemon_warning(engine, cfg) -> str | None:  # type: ignore[no-untyped-def]
    """A line to print when no daemon is keeping this database (else None). Lines for a
    daemon that should be running but is silent start with 'daemon not seen'."""
    from scheduler.ownership import read_heartbeat

    hb = read_heartbeat(engine)
    if hb is None:
        return "no spotwise daemon has run on this database yet: start one (spotwise daemon)"
    age = hb.age().total_seconds()
    stale = max(60.0, 6 * cfg.daemon.reconcile_interval.total_seconds() / _speed(cfg))
    if hb.status == "stopped":
        return f"the spotwise daemon stopped {_ago(age)} ago: start it (spotwise daemon)"
    if age > stale:
        return f"daemon not seen for {_ago(age)} (pid {hb.pid} on {hb.host})"
    return None


def _speed(cfg) -> float:  # type: ignore[no-untyped-def]
    local = cfg.providers.local
    if local is None or cfg.providers.aws is not None:
        return 1.0
    return float(local.speedup)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=views.json_default) + "\n")


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


@app.command()
def daemon(config: ConfigOpt = None) -> None:
    """Run the daemon in the foreground (what systemd starts)."""
    import signal

    # Until the daemon installs its own handlers, a SIGHUP must not end the process.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from scheduler.daemon import Daemon

    cfg = load_config(config)
    logging.basicConfig(
        level=cfg.daemon.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    raise typer.Exit(Daemon(config).run())


@app.command()
def submit(
    job_file: Annotated[Path, typer.Argument(help="Job file (TOML)")],
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Validate and enqueue a job; prints its id."""
    from scheduler.jobs import submit as submit_job
    from scheduler.jobspec import check_team

    spec = load_jobspec(job_file)
    cfg = load_config(config)
    now = clock_for(cfg).now()
    # Everything that can never run is refused before the job is queued.
    spec.validate_for_submit(now, source=str(job_file))
    check_team(spec, cfg, source=str(job_file))
    engine = open_existing(cfg.daemon.resolved_database_url())
    job = submit_job(engine, spec, now, cfg.daemon.resolved_checkpoint_root())
    warning = _daemon_warning(engine, cfg)
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    if output is Output.json:
        _print_json({"id": job.id, "name": job.name, "state": job.state.value})
    else:
        out.print(job.id)


def _status_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="spotwise jobs", title_justify="left")
    for name, kw in (
        ("ID", {}),
        ("NAME", {}),
        ("STATE", {}),
        ("WHERE", {}),
        ("INSTANCE", {}),
        ("MARKET", {}),
        ("$/H", {"justify": "right"}),
        ("SPENT", {"justify": "right"}),
        ("PROGRESS", {"justify": "right"}),
        ("RECOV", {"justify": "right"}),
        ("REASON", {}),
    ):
        t.add_column(name, no_wrap=name != "REASON", justify=kw.get("justify", "left"))  # type: ignore[arg-type]
    colors = {
        "RUNNING": "green",
        "SUCCEEDED": "bold green",
        "FAILED": "red",
        "HELD": "yellow",
        "RECOVERING": "magenta",
        "CANCELLED": "dim",
    }
    for r in rows:
        where = "/".join(x for x in (r["cloud"], r["region"], r["zone"]) if x) or "-"
        prog = f"{r['progress_step']}/{r['total_steps']}" if r["total_steps"] else "-"
        state = r["state"]
        t.add_row(
            r["id"],
            r["name"],
            f"[{colors.get(state, 'white')}]{state}[/]",
            where,
            r["instance"] or "-",
            r["market"] or "-",
            _money(r["price_per_hour"]) if r["price_per_hour"] else "-",
            _money(r["spent_usd"]),
            prog,
            str(r["recoveries"]),
            r["reason"],
        )
    return t


@app.command()
def status(
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes")] = 2.0,
) -> None:
    """One row per job: where it runs, what it costs, why it waits."""
    cfg, engine = _engine(config)
    warning = _daemon_warning(engine, cfg)
    # Exit 3 when the daemon should be running but its heartbeat is stale or absent; a
    # daemon that stopped cleanly is reported, not an error.
    failing = warning is not None and "stopped" not in warning
    if output is Output.json:
        _print_json({"jobs": views.job_rows(engine), "daemon_warning": warning})
        if failing:
            raise typer.Exit(3)
        return
    if not watch:
        out.print(_status_table(views.job_rows(engine)))
        if warning:
            err.print(f"warning: {warning}", markup=False, highlight=False)
        if failing:
            raise typer.Exit(3)
        return
    with Live(_status_table(views.job_rows(engine)), console=out, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(_status_table(views.job_rows(engine)))
        except KeyboardInterrupt:
            pass


@app.command()
def show(
    job: Annotated[str, typer.Argument(help="Job id, id prefix or name")],
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """One job: attempts, events, cost."""
    _, engine = _engine(config)
    doc = views.job_detail(engine, job)
    if output is Output.json:
        _print_json(doc)
        return
    j = doc["job"]
    out.print(f"[bold]{j['id']}[/] {j['name']} ({j['team']})  [bold]{j['state']}[/]  {j['reason']}")
    cost = _money(j["cost_usd"])
    out.print(f"cost {cost}  recoveries {j['recoveries']}  checkpoint {j['checkpoint_uri']}")
    t = Table(title="attempts", title_justify="left")
    for c in ("#", "POOL", "INSTANCE", "$/H", "STARTED", "ENDED", "END", "COST"):
        t.add_column(c)
    for a in doc["attempts"]:
        t.add_row(
            str(a["number"]),
            a["pool"],
            a["instance_id"] or "-",
            _money(a["price_per_hour"]),
            _short(a["started_at"]),
            _short(a["ended_at"]),
            a["end_reason"] or a["state"],
            _money(a["cost_usd"]),
        )
    out.print(t)
    _print_events(doc["events"])


def _short(ts: datetime | None) -> str:
    return ts.strftime("%H:%M:%S") if ts else "-"


def _print_events(events: list[dict[str, Any]]) -> None:
    t = Table(title="events", title_justify="left")
    for c in ("AT", "JOB", "KIND", "MESSAGE"):
        t.add_column(c)
    for e in events:
        style = {"warning": "yellow", "error": "red"}.get(e["level"], "")
        t.add_row(
            _short(e["at"]),
            e["job_id"] or "-",
            f"[{style}]{e['kind']}[/]" if style else e["kind"],
            e["message"],
        )
    out.print(t)


@app.command()
def cancel(
    job: Annotated[str, typer.Argument(help="Job id, id prefix or name")], config: ConfigOpt = None
) -> None:
    """Cancel a job (its instance is asked to checkpoint and stop)."""
    from scheduler.jobs import cancel as cancel_job

    cfg, engine = _engine(config)
    j = cancel_job(engine, job, clock_for(cfg).now())
    out.print(f"cancel requested for {j.id}")
    warning = _daemon_warning(engine, cfg)
    if warning:
        err.print(f"warning: {warning}", markup=False, highlight=False)


@app.command()
def prices(
    gpu: Annotated[str | None, typer.Option(help="GPU model, e.g. A100")] = None,
    cloud: Annotated[str | None, typer.Option(help="aws, gcp, azure")] = None,
    market: Annotated[str | None, typer.Option(help="spot or on-demand")] = None,
    limit: Annotated[int, typer.Option(help="Rows to show (table)")] = 30,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Current offerings from the configured providers, cheapest first."""
    cfg = load_config(config)
    rows, problems = views.live_offerings(cfg, gpu=gpu, cloud=cloud, market=market)
    for p in problems:
        err.print(f"[yellow]warning:[/] {p}")
    if output is Output.json:
        _print_json({"offerings": rows, "errors": problems})
        return
    t = Table(title=f"{len(rows)} offerings", title_justify="left")
    for c in ("CLOUD", "REGION", "ZONE", "TYPE", "GPU", "MARKET", "$/H", "$/GPU-H"):
        t.add_column(c)
    for r in rows[:limit]:
        per_gpu = r["price_per_hour"] / max(r["gpu_count"], 1)
        t.add_row(
            r["cloud"],
            r["region"],
            r["zone"],
            r["instance_type"],
            f"{r['gpu_count']}x {r['gpu_model']} {r['gpu_memory_gb']:g}GB",
            r["market"],
            f"{r['price_per_hour']:.4f}",
            f"{per_gpu:.4f}",
        )
    out.print(t)


@app.command()
def budget(config: ConfigOpt = None, output: OutputOpt = Output.table) -> None:
    """Each budget: limit, window, spent, projected, state."""
    cfg, engine = _engine(config)
    rows = views.budget_rows(engine, cfg)
    if output is Output.json:
        _print_json({"budgets": rows})
        return
    t = Table(title="budgets", title_justify="left")
    for c in ("NAME", "SCOPE", "WINDOW", "LIMIT", "SPENT", "BURN/H", "PROJECTED", "KIND", "STATE"):
        t.add_column(c)
    for r in rows:
        t.add_row(
            r["name"],
            r["scope"],
            r["window"],
            _money(r["limit_usd"]),
            _money(r["spent_usd"]),
            _money(r["burn_per_hour"]),
            _money(r["projected_usd"]),
            "hard" if r["hard"] else "soft",
            r["state"],
        )
    out.print(t)


@app.command()
def events(
    job: Annotated[str | None, typer.Option("--job", "-j", help="Only this job")] = None,
    limit: Annotated[int, typer.Option(help="Newest N events")] = 50,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The audit log: what the daemon decided and why."""
    _, engine = _engine(config)
    rows = views.event_rows(engine, job, limit)
    if output is Output.json:
        _print_json({"events": rows})
        return
    _print_events(rows)


@app.command("check-config")
def check_config(
    file: Annotated[Path | None, typer.Argument(help="Config file to validate")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Validate a config file; exit 2 with one message per problem."""
    path = file or config
    cfg = load_config(path)
    providers = [
        n for n in ("local", "aws", "gcp", "azure") if getattr(cfg.providers, n) is not None
    ]
    if output is Output.json:
        _print_json(
            {
                "ok": True,
                "file": str(path) if path else None,
                "providers": providers,
                "budgets": [b.name for b in cfg.budgets],
                "database_url": cfg.daemon.masked_database_url(),
                "state_dir": str(cfg.daemon.resolved_state_dir()),
            }
        )
        return
    out.print(
        f"ok {path or 'built-in defaults'}: providers {', '.join(providers)}; "
        f"{len(cfg.budgets)} budget(s); database {cfg.daemon.masked_database_url()}",
        markup=False,
        highlight=False,
    )


db_app = typer.Typer(help="The database schema (Alembic migrations).", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Bring the database schema to this version (the daemon also does it on start)."""
    from scheduler.db import make_engine, upgrade

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    before, after = upgrade(make_engine(url, create_dir=True))
    where = redact_url(url)
    if before == after:
        out.print(f"{where}: schema already at {after}", markup=False, highlight=False)
    else:
        out.print(f"{where}: schema {before or 'empty'} -> {after}", markup=False, highlight=False)


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Keep the demo's state here")] = None,
    speedup: Annotated[float, typer.Option(help="Market seconds per real second")] = 120.0,
) -> None:
    """The whole system on the local market, start to finish (about a minute)."""
    from scheduler.demo import run_demo

    # Piped output gets a width that fits the tables instead of Rich's 80-column default.
    raise typer.Exit(run_demo(workdir=workdir, speedup=speedup, console=out))


def _mount_bench() -> None:
    try:
        from scheduler.bench import bench_app
        from scheduler.bench_daemon import register
    except ImportError:  # the benchmark module is optional in trimmed installs
        return
    register(bench_app)
    app.add_typer(
        bench_app, name="bench", help="Benchmarks against baselines measured in the same run."
    )


_mount_bench()


def _print_error(text: str, exit_code: int) -> None:
    """Each problem on its own 'error: ' line, as plain text (no Rich markup), passwords masked."""
    from scheduler.errors import mask_urls

    red = sys.stderr.isatty()
    for line in mask_urls(str(text)).splitlines() or [""]:
        prefix = "\x1b[31merror:\x1b[0m" if red else "error:"
        sys.stderr.write(f"{prefix} {line}\n")
    sys.stderr.flush()
    sys.exit(exit_code)


_last_db_url: list[str] = []  # the URL of the database most recently connected to


def _remember_db_urls() -> None:
    """Note each engine's URL as it connects, so a database error can say which database."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "handle_error")
    def _failed(ctx) -> None:  # type: ignore[no-untyped-def]
        if ctx.engine is not None:  # also set for errors while connecting
            _last_db_url[:] = [ctx.engine.url.render_as_string(hide_password=True)]


def _database_problem(e: Exception) -> str:
    where = _last_db_url[0] if _last_db_url else "the configured database_url"
    detail = str(getattr(e, "orig", None) or e).splitlines()[0] if str(e) else type(e).__name__
    text = detail.lower()
    if "not a database" in text or "malformed" in text or "no such table" in text:
        return f"the database at {where} is not a spotwise database or is corrupted: {detail}"
    return f"the database at {where} cannot be used: {detail}"


def main() -> None:
    import sqlite3

    from sqlalchemy.exc import DatabaseError

    _remember_db_urls()
    try:
        app()
    except UserError as e:
        _print_error(str(e), e.exit_code)
    except (DatabaseError, sqlite3.DatabaseError) as e:
        _print_error(_database_problem(e), UserError.exit_code)
