"""`spotwise bench ...`: benchmarks that print measured figures next to a baseline measured in
the same run. Mounted by the CLI as the `bench` sub-command."""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

bench_app = typer.Typer(
    help="Benchmarks against baselines measured in the same run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_out = Console()
_err = Console(stderr=True)


class Output(StrEnum):
    table = "table"
    json = "json"


OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="A small subset (for tests)")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", help="Worker processes (default: CPUs)")]


@bench_app.callback()
def _group() -> None:
    """Benchmarks against baselines measured in the same run."""


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@bench_app.command()
def deadline(output: OutputOpt = Output.table, quick: QuickOpt = False, jobs: JobsOpt = 0) -> None:
    """Deadline policies replayed over real spot traces: cost, misses, score, ratio to optimal."""
    from scheduler.replay.scenarios import ALL, collect, run_case, settings

    t0 = time.perf_counter()
    chosen = settings(quick)
    tasks = [(si, case) for si, s in enumerate(chosen) for case in s.cases]
    results: dict[int, list] = {i: [] for i in range(len(chosen))}
    workers = jobs or min(4, os.cpu_count() or 1)
    done = 0
    if workers <= 1 or quick:
        for si, case in tasks:
            results[si].append(run_case(case, ALL, chosen[si].dp_units))
            done += 1
            _progress(f"[{done}/{len(tasks)}] {chosen[si].key}: {case.label}")
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futs = {
                pool.submit(run_case, case, ALL, chosen[si].dp_units): (si, case)
                for si, case in tasks
            }
            for fut in as_completed(futs):
                si, case = futs[fut]
                results[si].append(fut.result())
                done += 1
                _progress(f"[{done}/{len(tasks)}] {chosen[si].key}: {case.label}")
    summary = [collect(s, results[i]) for i, s in enumerate(chosen)]
    elapsed = time.perf_counter() - t0
    doc = _deadline_doc(summary, elapsed, quick)
    if output is Output.json:
        print(json.dumps(doc))
        return
    for res in doc["settings"]:
        _print_setting(res)
    _out.print(f"{sum(s['runs'] for s in doc['settings'])} windows in {elapsed:.1f} s")


def _deadline_doc(summary: list, elapsed: float, quick: bool) -> dict[str, Any]:
    settings_doc = []
    for r in summary:
        rows = []
        for name, st in r.stats.items():
            rows.append(
                {
                    "policy": name,
                    "avg_cost_usd": round(st.mean, 4),
                    "deadline_misses": st.misses,
                    "score": round(r.score(name), 2),
                    "ratio_to_optimal": round(r.ratio(name), 4),
                }
            )
        settings_doc.append(
            {
                "setting": r.setting.key,
                "title": r.setting.title,
                "runs": r.runs,
                "all_on_demand_cost_usd": round(r.od_cost, 4),
                "all_spot_cost_usd": round(r.spot_cost, 4),
                "policies": rows,
                "published": r.setting.published,
                "published_kind": r.setting.published_kind,
            }
        )
    return {"benchmark": "deadline", "quick": quick, "elapsed_s": round(elapsed, 2),
            "settings": settings_doc}  # fmt: skip


def _print_setting(res: dict[str, Any]) -> None:
    table = Table(title=f"{res['title']}: {res['runs']} runs")
    for col in ("policy", "avg cost $", "misses", "score", "x optimal"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for row in res["policies"]:
        table.add_row(
            row["policy"],
            f"{row['avg_cost_usd']:.2f}",
            str(row["deadline_misses"]),
            f"{row['score']:.1f}",
            f"{row['ratio_to_optimal']:.3f}",
        )
    _out.print(table)
    pub = ", ".join(f"{k} {v:g}" for k, v in res["published"].items())
    unit = "score" if res["published_kind"] == "score" else "avg cost $"
    _out.print(f"published ({unit}): {pub}\n")
