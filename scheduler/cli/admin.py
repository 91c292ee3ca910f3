"""Administration: `spotwise check-config` (validate a config file), `db upgrade` (the schema's
Alembic migrations) and `service install` (the daemon as a systemd service).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scheduler.cli.common import (
    ConfigOpt,
    Output,
    OutputOpt,
    print_json,
    print_out,
    remember_database_urls,
)

commands = typer.Typer()
db_app = typer.Typer(help="The database schema (Alembic migrations).", no_args_is_help=True)
commands.add_typer(db_app, name="db")
service_app = typer.Typer(help="Run the daemon as a systemd service.", no_args_is_help=True)
commands.add_typer(service_app, name="service")


@commands.command("check-config")
def check_config(
    file: Annotated[Path | None, typer.Argument(help="Config file to validate")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Validate a config file; exit 2 with one message per problem."""
    from scheduler.state import read_models
    from scheduler.state.files import load_config

    path = file or config
    cfg = load_config(path)
    providers = [
        n for n in ("local", "aws", "gcp", "azure") if getattr(cfg.providers, n) is not None
    ]
    if output is Output.json:
        print_json(
            read_models.document(
                ok=True,
                file=str(path) if path else None,
                providers=providers,
                budgets=[b.name for b in cfg.budgets],
                database_url=cfg.daemon.masked_database_url(),
                state_dir=str(cfg.daemon.resolved_state_dir()),
            )
        )
        return
    print_out(
        f"ok {path or 'built-in defaults'}: providers {', '.join(providers)}; "
        f"{len(cfg.budgets)} budget(s); database {cfg.daemon.masked_database_url()}"
    )


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Bring the database schema to this version (the daemon also does it on start), and
    list the unfinished jobs whose stored spec no longer validates."""
    from scheduler.state.db import make_engine, redact_url, upgrade
    from scheduler.state.files import load_config

    cfg = load_config(config)
    url = cfg.daemon.resolved_database_url()
    remember_database_urls()
    engine = make_engine(url, create_dir=True)
    before, after = upgrade(engine)
    where = redact_url(url)
    if before == after:
        print_out(f"{where}: schema already at {after}")
    else:
        print_out(f"{where}: schema {before or 'empty'} -> {after}")
    from scheduler.state.stored_specs import invalid_specs

    bad = invalid_specs(engine)
    if bad:
        print_out(
            f"{len(bad)} unfinished job(s) whose stored spec no longer validates (the daemon "
            "fails each when it would be placed; one running now runs on):",
            soft_wrap=True,
        )
        for x in bad:
            print_out(f"  {x.line()}", soft_wrap=True)


@service_app.command("install")
def service_install(
    root: Annotated[
        Path | None,
        typer.Option(help="Stage into this directory; commands are recorded, not run"),
    ] = None,
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="Remove the unit (config and state are kept)")
    ] = False,
) -> None:
    """User, venv, config, unit and tmpfiles for the daemon; safe to run again."""
    from scheduler.daemon import service

    report = service.uninstall(root) if uninstall else service.install(root)
    for line in report.lines():
        print_out(line)
    if not uninstall and report.ran:
        print_out("next: systemctl enable --now spotwise")
