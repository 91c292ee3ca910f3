"""`spotwise prices`: the offerings the daemon's providers list now, cheapest first.

Asks each provider live (not the daemon's cached catalog), with the providers the daemon
runs with (its recorded config; else this command's own); the local market is opened
read-only, so looking at prices writes nothing to its state directory. The local market's
offerings carry the real clouds' names: their CLOUD says `local` (-o json keeps both the
provider and the cloud it imitates).

Plain columns at any width: TYPE, ZONE and MARKET are never cut (eight p4d rows must not
look alike); a zone that names its region stands for both, and $/GPU-H, then the GPU's
memory, give way first on a narrow terminal. `-o wide` adds each spot pool's interruption
hazard and where it came from (scheduler/state/pool_hazards.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scheduler.cli.columns import Col, layout, lines
from scheduler.cli.common import (
    ConfigOpt,
    Output,
    WideOutputOpt,
    print_err,
    print_json,
    terminal_width,
)

if TYPE_CHECKING:
    from scheduler.core.config import Config
    from scheduler.state.read_connection import Database

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
# -o wide: the interruption hazard placement weighs, and where it came from (the cloud's
# risk data, the daemon's observations, or the configured prior).
HAZARD_COLUMNS = (Col("HAZARD/H", right=True), Col("FROM"))


@commands.command()
def prices(
    gpu: Annotated[str | None, typer.Option(metavar="MODEL", help="GPU model, e.g. A100")] = None,
    cloud: Annotated[
        str | None, typer.Option(metavar="CLOUD", help="aws, gcp, azure (or local)")
    ] = None,
    market: Annotated[str | None, typer.Option(metavar="MARKET", help="spot or on-demand")] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Rows to show (table)")] = 30,
    config: ConfigOpt = None,
    output: WideOutputOpt = Output.table,
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

        cfg, db = _daemon_or_own_config(config)
        providers = build_providers(cfg, read_only=True)
        rows, problems = read_models.live_offerings(providers, gpu=gpu, cloud=cloud, market=market)
        if output in ("wide", "json") and rows:
            from scheduler.state.pool_hazards import annotate

            problems += annotate(rows, providers, db, cfg.policy.spot_interruption_prior)
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
    cols = COLUMNS + (HAZARD_COLUMNS if output == "wide" else ())
    if all(c["ZONE"].startswith(c["REGION"]) for c in cells):
        cols = tuple(c for c in cols if c.name != "REGION")
    width = None if output == "wide" else terminal_width()
    for line in lines(layout(cols, cells, width, wide=output == "wide"), cells):
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
        "HAZARD/H": f"{float(r.get('hazard_per_hour', 0.0)):.3f}",  # type: ignore[arg-type]
        "FROM": str(r.get("hazard_from", "")),
    }


def _daemon_or_own_config(config: Path | None) -> tuple[Config, Database | None]:
    """The daemon's recorded config and its database when that can be read, else this
    command's own config and no database (prices need none: a fresh machine still lists what
    it could buy)."""
    from scheduler.cli.common import daemon_config
    from scheduler.state.files import load_config
    from scheduler.state.read_connection import open_for_reading

    cfg = load_config(config)
    try:
        db = open_for_reading(cfg.daemon.resolved_database_url())
    except Exception:  # no database yet, or not readable: the providers this file names
        return cfg, None
    return daemon_config(cfg, db, config, warn=True), db
