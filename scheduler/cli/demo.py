"""`spotwise demo`: the whole system on the local market, start to finish, in a minute or two."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scheduler.cli.common import out_console, remember_database_urls

commands = typer.Typer()


@commands.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Keep the demo's state here")] = None,
    speedup: Annotated[float, typer.Option(help="Market seconds per real second")] = 120.0,
) -> None:
    """The whole system on the local market, start to finish (a minute or two)."""
    from scheduler.lab.demo import run_demo

    remember_database_urls()
    # Piped output gets a width that fits the tables instead of Rich's 80-column default.
    raise typer.Exit(run_demo(workdir=workdir, speedup=speedup, console=out_console()))
