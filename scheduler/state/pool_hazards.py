"""Each offering's interruption hazard, and where it came from, for `spotwise prices -o wide`.

The hazard is what placement weighs (scheduler.core.hazard): the cloud's own risk data as a
prior (asked live of each provider that reads any, as `prices` asks for offerings), updated
with what the daemon observed in the pool (its `poolstate` rows, read when its database can
be read, never written). A pool with neither shows the configured prior. On-demand rows
have no hazard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from providers.base import Market, Offering, Provider, pool_key
from scheduler.core import hazard
from scheduler.state.read_connection import placeholders, reading

if TYPE_CHECKING:
    from scheduler.state.read_connection import Database


def observed(db: Database | None, pools: Sequence[str]) -> dict[str, tuple[int, float]]:
    """pool -> (interruptions, exposure hours) the daemon recorded; {} without a database."""
    if db is None or not pools:
        return {}
    out: dict[str, tuple[int, float]] = {}
    with reading(db) as query:
        for i in range(0, len(pools), 500):
            chunk = list(pools[i : i + 500])
            for pool, n, hours in query(
                "SELECT pool, interruptions, exposure_hours FROM poolstate "
                f"WHERE pool IN ({placeholders(chunk)})",
                chunk,
            ):
                out[str(pool)] = (int(n or 0), float(hours or 0.0))
    return out


def annotate(
    rows: list[dict[str, Any]],
    providers: Mapping[str, Provider],
    db: Database | None,
    default_prior: float,
) -> list[str]:
    """Add `hazard_per_hour` and `hazard_from` to every row (in place); returns problems."""
    problems: list[str] = []
    priors: dict[str, tuple[float, str]] = {}
    for name, provider in providers.items():
        read = getattr(provider, "risk_signals", None)
        mine = [r for r in rows if r["provider"] == name and r["market"] == Market.SPOT.value]
        if read is None or not mine:
            continue
        offerings = [_offering(r) for r in mine]
        try:
            priors.update(hazard.priors(read(offerings)))
        except Exception as e:  # the cloud's risk data is optional: say so, show the rest
            problems.append(f"{name}: no risk data: {str(e).splitlines()[0] if str(e) else e}")
    spot = [r for r in rows if r["market"] == Market.SPOT.value]
    seen = observed(db, sorted({_pool(r) for r in spot}))
    for r in rows:
        if r["market"] != Market.SPOT.value:
            r["hazard_per_hour"], r["hazard_from"] = 0.0, "on-demand"
            continue
        pool = _pool(r)
        prior, source = priors.get(pool, (default_prior, "config prior"))
        n, hours = seen.get(pool, (0, 0.0))
        r["hazard_per_hour"] = hazard.fused_rate(prior, n, hours)
        r["hazard_from"] = source if not hours else f"{source} + {n} in {hours:.0f}h seen"
    return problems


def _pool(r: Mapping[str, Any]) -> str:
    return pool_key(str(r["cloud"]), str(r["zone"]), str(r["instance_type"]), str(r["market"]))


def _offering(r: Mapping[str, Any]) -> Offering:
    return Offering(
        cloud=r["cloud"], region=r["region"], zone=r["zone"], instance_type=r["instance_type"],
        gpu_model=r["gpu_model"], gpu_count=r["gpu_count"], gpu_memory_gb=r["gpu_memory_gb"],
        vcpus=r["vcpus"], memory_gb=r["memory_gb"], market=Market(r["market"]),
        price_per_hour=r["price_per_hour"], seen_at=r["seen_at"],
    )  # fmt: skip
