"""The commands that change what the daemon should do: `submit`, `cancel`, `release` and
`requeue`. Each writes the desired state (state.desired, state.requeue) and leaves the doing
to the daemon, so each says so when no daemon is keeping the database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scheduler.cli.common import (
    ConfigOpt,
    Output,
    OutputOpt,
    open_engine,
    out_console,
    print_err,
    print_json,
    print_out,
    remember_database_urls,
    warn_if_no_daemon,
)

commands = typer.Typer()


@commands.command()
def submit(
    job_file: Annotated[Path, typer.Argument(help="Job file (TOML)")],
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Validate and enqueue a job; prints its id."""
    from scheduler.core.config import check_team
    from scheduler.daemon.wiring import clock_for
    from scheduler.state import read_models
    from scheduler.state.db import open_existing
    from scheduler.state.desired import submit as submit_job
    from scheduler.state.files import load_config, load_jobspec

    spec = load_jobspec(job_file)
    cfg = load_config(config)
    now = clock_for(cfg).now()
    # Everything that can never run is refused before the job is queued.
    spec.validate_for_submit(now, source=str(job_file))
    check_team(spec, cfg, source=str(job_file))
    remember_database_urls()
    engine = open_existing(cfg.daemon.resolved_database_url())
    job = submit_job(engine, spec, now, cfg.daemon.resolved_checkpoint_root(), source=str(job_file))
    warn_if_no_daemon(cfg, engine)
    if output is Output.json:
        print_json(read_models.document(id=job.id, name=job.name, state=job.state.value))
    else:
        out_console().print(job.id)


@commands.command()
def cancel(
    job: Annotated[str | None, typer.Argument(help="Job id, id prefix or name")] = None,
    team: Annotated[
        str | None, typer.Option("--team", "-t", help="Every unfinished job of this team")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Cancel a job, or every unfinished job of a team (instances checkpoint and stop)."""
    from scheduler.core.errors import UserError
    from scheduler.core.states import JobState
    from scheduler.daemon.wiring import clock_for
    from scheduler.state import read_models
    from scheduler.state.desired import cancel as cancel_job

    if (job is None) == (team is None):
        raise UserError("give a JOB or --team TEAM (not both)")
    cfg, engine = open_engine(config)
    now = clock_for(cfg).now()
    if job is not None:
        ids = [cancel_job(engine, job, now).id]
    else:
        rows = read_models.job_rows(engine, team=team)
        live = [r["id"] for r in rows if not JobState(r["state"]).terminal]
        ids = [cancel_job(engine, i, now).id for i in live]
        if not ids:
            print_err(f"no unfinished jobs in team {team!r}")
    for i in ids:
        print_out(f"cancel requested for {i}")
    warn_if_no_daemon(cfg, engine)


@commands.command()
def release(
    job: Annotated[str, typer.Argument(help="A HELD job: id, id prefix or name")],
    config: ConfigOpt = None,
) -> None:
    """Put a HELD job back in the queue (a budget that still binds holds it again)."""
    from scheduler.daemon.wiring import clock_for
    from scheduler.state.requeue import release as release_job

    cfg, engine = open_engine(config)
    j = release_job(engine, job, clock_for(cfg).now())
    print_out(f"{j.id} released: {j.state.value}")
    warn_if_no_daemon(cfg, engine)


@commands.command()
def requeue(
    job: Annotated[str, typer.Argument(help="A FAILED job: id, id prefix or name")],
    config: ConfigOpt = None,
) -> None:
    """Run a FAILED job again, with its failure counters reset."""
    from scheduler.daemon.wiring import clock_for
    from scheduler.state.requeue import requeue as requeue_job

    cfg, engine = open_engine(config)
    j = requeue_job(engine, job, clock_for(cfg).now())
    print_out(f"{j.id} requeued: {j.state.value}")
    warn_if_no_daemon(cfg, engine)
