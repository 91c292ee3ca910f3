"""`spotwise prices`: the offerings the daemon's providers list now, cheapest first.

Asks each provider live (not the daemon's cached catalog), with the providers the daemon
runs with (its recorded config; else this command's own); the local market is opened
read-only, so looking at prices writes nothing to its state directory. The local market's
offerings carry the real clouds' names: their CLOUD says `local` (-o json keeps both the
provider and the cloud it imitates).

Plain columns at any width: TYPE, ZONE and MARKET are never cut (eight p4d rows must not
look alike); a zone that names its region stands for both, and $/GPU-H, then the GPU's
memory, give way first on a narrow terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scheduler.cli.columns import Col, layout, lines
from scheduler.cli.common import (
    ConfigOpt,
    Format,
    OutputOpt,
    print_err,
    print_json,
    terminal_width,
)

if TYPE_CHECKING:
    from scheduler.core.config import Config

commands = typer.Typer()

COLUMNS = (
    Col("CLOUD"),
    Col("REGION", 3),
    Col("ZONE"),
    Col("TYPE"),
    Col("GPUS"),
    Col("GPU MEM", 2, right=True),
    Col("MARKET"),
    Col("$/H", right=True),
    Col("$/GPU-H", 1, right=True),
)


@commands.command()
def prices(
    gpu: Annotated[str | None, typer.Option(metavar="MODEL", help="GPU model, e.g. A100")] = None,
    cloud: Annotated[
        str | None, typer.Option(metavar="CLOUD", help="aws, gcp, azure (or local)")
    ] = None,
    market: Annotated[str | None, typer.Option(metavar="MARKET", help="spot or on-demand")] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Rows to show (table)")] = 30,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """Current offerings from the daemon's providers, cheapest first."""
    from scheduler.cli.remote import target, with_times
    from scheduler.state import read_models

    api = target()
    if api is not None:
        query = {k: v for k, v in (("gpu", gpu), ("cloud", cloud), ("market", market)) if v}
        got = with_times(api.get("/prices", query))
        rows, problems = got["offerings"], got["errors"]
    else:
        from scheduler.daemon.wiring import build_providers

        cfg = _daemon_or_own_config(config)
        rows, problems = read_models.live_offerings(
            build_providers(cfg, read_only=True), gpu=gpu, cloud=cloud, market=market
        )
    for p in problems:
        print_err(f"warning: {p}")
    if output == "json":
        print_json(read_models.document(offerings=rows, errors=problems))
        return
    if not rows:
        print_err("no offerings" + (" match" if gpu or cloud or market else " listed"))
        return
    cells = [_cells(r) for r in rows[:limit]]
    # A zone that begins with its region names both: REGION only where one does not.
    if all(c["ZONE"].startswith(c["REGION"]) for c in cells):
        cols = tuple(c for c in COLUMNS if c.name != "REGION")
    else:
        cols = COLUMNS
    for line in lines(layout(cols, cells, terminal_width()), cells):
        sys.stdout.write(line + "\n")
    if len(rows) > limit:
        print_err(f"{limit} of {len(rows)} offerings shown: --limit N for more")


def _cells(r: dict[str, object]) -> dict[str, str]:
    price = float(r["price_per_hour"])  # type: ignore[arg-type]
    count = int(r["gpu_count"])  # type: ignore[call-overload]
    cloud = str(r["cloud"])
    return {
        "CLOUD": "local" if r["provider"] == "local" else cloud,
        "REGION": str(r["region"]),
        "ZONE": str(r["zone"]),
        "TYPE": str(r["instance_type"]),
        "GPUS": f"{count}x{r['gpu_model'] or 'none'}",
        "GPU MEM": f"{float(r['gpu_memory_gb']):g}GB",  # type: ignore[arg-type]
        "MARKET": str(r["market"]),
        "$/H": f"{price:.4f}",
        "$/GPU-H": f"{price / max(count, 1):.4f}",
    }


def _daemon_or_own_config(config: Path | None) -> Config:
    """The daemon's recorded config when its database can be read, else this command's own
    (prices need no database: a fresh machine still lists what it could buy)."""
    from scheduler.cli.common import daemon_config
    from scheduler.state.files import load_config
    from scheduler.state.read_connection import open_for_reading

    cfg = load_config(config)
    try:
        db = open_for_reading(cfg.daemon.resolved_database_url())
    except Exception:  # no database yet, or not readable: the providers this file names
        return cfg
    return daemon_config(cfg, db, config, warn=True)
