"""The commands that change what the daemon should do: `submit`, `cancel`, `release` and
`requeue`. Each writes the desired state (state.desired, state.requeue) and leaves the doing
to the daemon, so each says so when no daemon is keeping the database. Each records the
Unix user who asked (the login user under sudo) on the job and in the audit log.
`submit --dry-run` writes nothing and prints the plan instead (cli/plan.py); cancelling a
whole team asks first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler.cli.common import (
    ConfigOpt,
    Format,
    OutputOpt,
    complete_jobs,
    open_engine,
    out_console,
    print_err,
    print_json,
    print_out,
    remember_database_urls,
    unix_user,
    warn_if_no_daemon,
)

commands = typer.Typer()


@commands.command()
def submit(
    job_file: Annotated[Path, typer.Argument(metavar="FILE", help="Job file (TOML)")],
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan (offering, expected cost, alternatives, budgets); submit nothing",
        ),
    ] = False,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """Validate and enqueue a job; prints its id."""
    from scheduler.cli.remote import target

    api = target()
    if api is not None:
        _submit_remote(api, job_file, dry_run, Format(str(output)))
        return
    if dry_run:
        from scheduler.cli.plan import dry_run as print_plan

        print_plan(job_file, config, Format(str(output)))
        return
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
    job = submit_job(
        engine,
        spec,
        now,
        cfg.daemon.resolved_checkpoint_root(),
        unix_user(),
        source=str(job_file),
    )
    warn_if_no_daemon(cfg, engine)
    if output == "json":
        print_json(read_models.document(id=job.id, name=job.name, state=job.state.value))
    else:
        out_console().print(job.id)


def _submit_remote(api: Any, job_file: Path, dry_run: bool, output: Format) -> None:
    """Submit through the API server: the file is read here (the same messages for one that
    cannot be read), checked and queued there, under the caller's user name."""
    from scheduler.core.errors import UserError
    from scheduler.state.files import read_toml_file

    if dry_run:
        raise UserError(
            "submit --dry-run plans with the daemon's catalog and budgets: run it on the "
            "daemon's host (without SPOTWISE_API)"
        )
    read_toml_file(job_file, "job file")
    doc = api.post("/jobs", {"file": str(job_file), "text": job_file.read_text()})
    _warn_remote(api)
    if output == "json":
        print_json(doc)
    else:
        out_console().print(doc["id"])


def _warn_remote(api: Any) -> None:
    from scheduler.cli.common import print_daemon_warning

    print_daemon_warning(api.heartbeat()[1])


@commands.command()
def cancel(
    job: Annotated[
        str | None,
        typer.Argument(
            metavar="JOB", help="Job id, id prefix or name", autocompletion=complete_jobs
        ),
    ] = None,
    team: Annotated[
        str | None,
        typer.Option("--team", "-t", metavar="TEAM", help="Every unfinished job of this team"),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Cancel a whole team without asking")
    ] = False,
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
    from scheduler.cli.remote import target

    api = target()
    if api is not None:
        if job is not None:
            ids = [api.post(f"{api.job_path(job)}/cancel")["id"]]
        else:
            rows = api.status_document([], team, None)["jobs"]
            live = [r for r in rows if not JobState(r["state"]).terminal]
            if live and not yes:
                _confirm_team_cancel(team or "", live)
            ids = [api.post(f"{api.job_path(r['id'])}/cancel")["id"] for r in live]
            if not ids:
                print_err(f"no unfinished jobs in team {team!r}")
        for i in ids:
            print_out(f"cancel requested for {i}")
        _warn_remote(api)
        return
    cfg, engine = open_engine(config)
    now = clock_for(cfg).now()
    who = unix_user()
    if job is not None:
        ids = [cancel_job(engine, job, now, who).id]
    else:
        rows = read_models.job_rows(engine, team=team)
        live = [r for r in rows if not JobState(r["state"]).terminal]
        if live and not yes:
            _confirm_team_cancel(team or "", live)
        ids = [cancel_job(engine, r["id"], now, who).id for r in live]
        if not ids:
            print_err(f"no unfinished jobs in team {team!r}")
    for i in ids:
        print_out(f"cancel requested for {i}")
    warn_if_no_daemon(cfg, engine)


def _confirm_team_cancel(team: str, live: list[dict[str, object]]) -> None:
    """Ask before cancelling every unfinished job of a team; without a terminal to ask on,
    refuse (exit 2) and say how to mean it (-y)."""
    import sys

    from scheduler.core.errors import UserError

    names = ", ".join(str(r["name"]) for r in live[:5]) + (", ..." if len(live) > 5 else "")
    if not sys.stdin.isatty():
        raise UserError(
            f"this would cancel {len(live)} unfinished job(s) of team {team!r} ({names}): "
            "add -y to confirm"
        )
    if not typer.confirm(
        f"cancel {len(live)} unfinished job(s) of team {team!r} ({names})?", default=False
    ):
        print_err("nothing cancelled")
        raise typer.Exit(1)


@commands.command()
def release(
    job: Annotated[
        str,
        typer.Argument(
            metavar="JOB",
            help="A HELD job: id, id prefix or name",
            autocompletion=complete_jobs,
        ),
    ],
    config: ConfigOpt = None,
) -> None:
    """Put a HELD job back in the queue (a budget that still binds holds it again)."""
    from scheduler.cli.remote import target

    api = target()
    if api is not None:
        doc = api.post(f"{api.job_path(job)}/release")
        print_out(f"{doc['id']} released: {doc['state']}")
        _warn_remote(api)
        return
    from scheduler.daemon.wiring import clock_for
    from scheduler.state.requeue import release as release_job

    cfg, engine = open_engine(config)
    j = release_job(engine, job, clock_for(cfg).now(), unix_user())
    print_out(f"{j.id} released: {j.state.value}")
    warn_if_no_daemon(cfg, engine)


@commands.command()
def requeue(
    job: Annotated[
        str,
        typer.Argument(
            metavar="JOB",
            help="A FAILED job: id, id prefix or name",
            autocompletion=complete_jobs,
        ),
    ],
    config: ConfigOpt = None,
) -> None:
    """Run a FAILED job again, with its failure counters reset."""
    from scheduler.cli.remote import target

    api = target()
    if api is not None:
        doc = api.post(f"{api.job_path(job)}/requeue")
        print_out(f"{doc['id']} requeued: {doc['state']}")
        _warn_remote(api)
        return
    from scheduler.daemon.wiring import clock_for
    from scheduler.state.requeue import requeue as requeue_job

    cfg, engine = open_engine(config)
    j = requeue_job(engine, job, clock_for(cfg).now(), unix_user())
    print_out(f"{j.id} requeued: {j.state.value}")
    warn_if_no_daemon(cfg, engine)
