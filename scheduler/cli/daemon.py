"""`spotwise daemon`: the daemon in the foreground, what systemd starts."""

from __future__ import annotations

from typing import Annotated

import typer

from scheduler.cli.common import ConfigOpt, remember_database_urls

commands = typer.Typer()


@commands.command()
def daemon(
    config: ConfigOpt = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="DEBUG, INFO, WARNING or ERROR (else $SPOTWISE_LOG_LEVEL, log_level)"),
    ] = None,
) -> None:
    """Run the daemon in the foreground (what systemd starts)."""
    import scheduler

    # Until the daemon installs its own handlers a SIGHUP is remembered, not fatal (the
    # console script installed this already, before its imports; an in-process call here).
    scheduler.hold_reloads()
    from scheduler.daemon.logs import configure, resolve_level
    from scheduler.daemon.process import Daemon
    from scheduler.state.files import load_config

    remember_database_urls()
    cfg = load_config(config)
    configure(resolve_level(cfg.daemon.log_level, log_level))
    raise typer.Exit(Daemon(config).run())
