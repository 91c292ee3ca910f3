"""`spotwise prices`: the offerings the configured providers list now, cheapest first.

Asks each provider live (not the daemon's cached catalog); the local market is opened
read-only, so looking at prices writes nothing to its state directory.
"""

from __future__ import annotations

from typing import Annotated

import typer

from scheduler.cli.common import (
    ConfigOpt,
    Output,
    OutputOpt,
    out_console,
    print_err,
    print_json,
)

commands = typer.Typer()


@commands.command()
def prices(
    gpu: Annotated[str | None, typer.Option(help="GPU model, e.g. A100")] = None,
    cloud: Annotated[str | None, typer.Option(help="aws, gcp, azure")] = None,
    market: Annotated[str | None, typer.Option(help="spot or on-demand")] = None,
    limit: Annotated[int, typer.Option(help="Rows to show (table)")] = 30,
    config: ConfigOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Current offerings from the configured providers, cheapest first."""
    from rich.table import Table

    from scheduler.daemon.wiring import build_providers
    from scheduler.state import read_models
    from scheduler.state.files import load_config

    cfg = load_config(config)
    rows, problems = read_models.live_offerings(
        build_providers(cfg, read_only=True), gpu=gpu, cloud=cloud, market=market
    )
    for p in problems:
        print_err(f"warning: {p}")
    if output is Output.json:
        print_json(read_models.document(offerings=rows, errors=problems))
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
    out_console().print(t)
