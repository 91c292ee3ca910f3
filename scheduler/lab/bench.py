"""What `spotwise bench deadline` and `bench placement` compute: the deadline policies replayed
over real spot traces, and placement speed against a pandas baseline, as JSON-ready documents.
The command line (scheduler/cli/bench.py) chooses the settings, prints the tables and the
progress; this module measures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

# Called after each replayed case with "[done/total] setting: case".
Step = Callable[[str], None]
# Called with a line of progress of the placement benchmark.
Progress = Callable[[str], None]


def choose_settings(split: Any, sweep: bool, quick: bool, windows: int | None) -> list:
    """The settings a deadline run replays: the sweep, the split settings on the train split,
    or the protocol settings (their windows are fixed: not split)."""
    from scheduler.lab.replay import bench_settings
    from scheduler.lab.replay.split import Split

    if sweep:
        return bench_settings.sweep(split, quick, windows)
    if split is Split.TRAIN:
        return bench_settings.split_settings(split, quick)
    return bench_settings.settings(quick)


def run_settings(chosen: list, quick: bool, jobs: int, step: Step) -> list:
    """Every case of every setting, in worker processes unless quick or one worker."""
    from scheduler.lab.replay.scenarios import ALL, collect, run_case

    tasks = [(si, case) for si, s in enumerate(chosen) for case in s.cases]
    results: dict[int, list] = {i: [] for i in range(len(chosen))}
    workers = jobs or min(4, os.cpu_count() or 1)
    done = 0
    if workers <= 1 or quick:
        for si, case in tasks:
            s = chosen[si]
            results[si].append(run_case(case, s.policies or ALL, s.dp_units))
            done += 1
            step(f"[{done}/{len(tasks)}] {s.key}: {case.label}")
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futs = {
                pool.submit(run_case, case, chosen[si].policies or ALL, chosen[si].dp_units): (
                    si,
                    case,
                )
                for si, case in tasks
            }
            for fut in as_completed(futs):
                si, case = futs[fut]
                results[si].append(fut.result())
                done += 1
                step(f"[{done}/{len(tasks)}] {chosen[si].key}: {case.label}")
    # keep case order stable whatever order the workers finished in
    order = {id(c): i for s in chosen for i, c in enumerate(s.cases)}
    out = []
    for i, s in enumerate(chosen):
        by_label = {c.label: order[id(c)] for c in s.cases}
        rs = sorted(results[i], key=lambda r: by_label.get(r.label, 0))
        out.append(collect(s, rs))
    return out


def _num(x: float) -> float | None:
    """JSON-safe (NaN -> null), and no "-0.0" for a figure that is zero but for float error
    (on-demand's score); rounded only on the way out (rounded)."""
    import math

    return None if math.isnan(x) else (0.0 if abs(x) < 1e-9 else x)


# Digits each figure of `bench deadline -o json` is given. The doc itself keeps every figure
# unrounded and the tables round once from it: rounded to 4.25 first, a measured 4.2514
# would print as 4.2.
_JSON_DIGITS = {
    "score": 2, "score_ci95": 2, "ci95": 2, "ratio_to_optimal": 4, "worse_than_up_pct": 1,
    "above_on_demand_pct": 1, "worst_vs_on_demand": 4, "ms_per_decision": 3,
    "avg_cost_usd": 4, "all_on_demand_cost_usd": 4, "all_spot_cost_usd": 4, "elapsed_s": 2,
}  # fmt: skip


def rounded(doc: Any, digits: int | None = None) -> Any:
    """`doc` with each figure named in _JSON_DIGITS rounded to its digits."""
    if isinstance(doc, dict):
        return {k: rounded(v, _JSON_DIGITS.get(k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [rounded(v, digits) for v in doc]
    if isinstance(doc, float) and digits is not None:
        return round(doc, digits) + 0.0
    return doc


def deadline_doc(summary: list, elapsed: float, quick: bool) -> dict[str, Any]:
    settings_doc = []
    sweep_cells = []  # per sweep cell: its results over all windows and per kind of trace
    for r in summary:
        rows = []
        for name, st in r.stats.items():
            lo, hi = r.score_ci(name)
            rows.append(
                {
                    "policy": name,
                    "avg_cost_usd": st.mean,
                    "deadline_misses": st.misses,
                    "score": _num(r.score(name)),
                    "score_ci95": [_num(lo), _num(hi)],
                    "ratio_to_optimal": _num(r.ratio(name)),
                    "worse_than_up_pct": _num(r.worse_than(name)),
                    "above_on_demand_pct": _num(r.above_on_demand(name)),
                    "worst_vs_on_demand": _num(r.worst_vs_on_demand(name)),
                    "ms_per_decision": _num(st.ms_per_decision),
                }
            )
        shown, why = r.published_status()
        doc: dict[str, Any] = {
            "setting": r.setting.key,
            "title": r.setting.title,
            "windows_from": r.setting.windows,
            "runs": r.runs,
            "clusters": len(set(r.clusters)),
            "all_on_demand_cost_usd": r.od_cost,
            "all_spot_cost_usd": r.spot_cost,
            "policies": rows,
            "published": r.setting.published if shown else {},
            "published_kind": r.setting.published_kind,
            "published_check": why,
        }
        if {"spotwise", *_BEST_OF} <= set(r.stats):
            doc["spotwise_minus_best_baseline"] = _delta_doc(r)
            if r.setting.key.startswith("sweep"):
                from scheduler.lab.replay.bench_settings import TRACE_KINDS

                parts = {"all": r} | {k: r.subset(keep) for k, keep in TRACE_KINDS.items()}
                sweep_cells.append(parts)
                for kind, sub in parts.items():
                    if kind != "all" and sub.runs:
                        doc[f"spotwise_minus_best_{kind}"] = _delta_doc(sub)
        settings_doc.append(doc)
    out = {"benchmark": "deadline", "quick": quick, "elapsed_s": elapsed,
           "settings": settings_doc}  # fmt: skip
    if sweep_cells:
        out["sweep_average"] = _sweep_average(sweep_cells)
    return out


_BEST_OF = ("greedy", "uniform-progress")  # spotwise is scored against the better of these


def _sweep_average(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """spotwise - best averaged over each overhead's cells and over the whole grid, over all
    windows and per kind of trace: "at least as good in expectation across the grid" is a
    statement about these means, which one cell's interval cannot make. `cells` holds each
    cell's results by kind ("all" and TRACE_KINDS), as deadline_doc computed them."""
    from scheduler.lab.replay.scenarios import pooled_delta

    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        overhead = f"{cell['all'].setting.cases[0].job.restart_overhead:g}"
        groups.setdefault(overhead, []).append(cell)
    groups["all"] = cells
    rows = []
    for overhead, group in groups.items():
        row: dict[str, Any] = {"overhead": overhead, "cells": len(group)}
        for kind in group[0]:
            subs = [cell[kind] for cell in group]
            if all(s.runs for s in subs):
                d, lo, hi = pooled_delta(subs, "spotwise", _BEST_OF)
                row[kind] = {"score": _num(d), "ci95": [_num(lo), _num(hi)]}
        rows.append(row)
    return rows


def _delta_doc(r: Any) -> dict[str, Any]:
    d, lo, hi = r.delta("spotwise", _BEST_OF)
    return {"score": _num(d), "ci95": [_num(lo), _num(hi)], "runs": r.runs}


def placement_doc(quick: bool, jobs_count: int, progress: Progress) -> dict[str, Any]:
    """Placement speed on the full offline catalogs (AWS+GCP+Azure) vs a pandas baseline
    (grouped by GPU model once, then argmin), which also checks every pick. Needs pandas."""
    from scheduler.core.catalog import Catalog
    from scheduler.core.placement import place
    from scheduler.lab.bench_data import catalog_rows, offerings
    from scheduler.lab.bench_data import placement as pb

    t0 = time.perf_counter()
    rows = catalog_rows()
    offers = offerings(rows)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    cat = Catalog(offers)
    t_cat = time.perf_counter() - t0
    t0 = time.perf_counter()
    base = pb.PandasBaseline(offers)
    t_df = time.perf_counter() - t0
    progress(f"{len(rows)} catalog rows, {len(offers)} offerings loaded in {t_load:.1f} s")

    repeat = 20 if quick else 200
    single: list[dict[str, Any]] = []
    for label, req in pb.SINGLE:
        r = pb.Request(req, 100.0)
        ours = pb.time_per_call(lambda r=r: place(r.req, cat, pb.context(r.hours)), repeat)  # type: ignore[misc]
        theirs = pb.time_per_call(lambda r=r: base.choice(r), max(5, repeat // 4))  # type: ignore[misc]
        d = place(req, cat, pb.context(100.0))
        single.append(
            {
                "request": label,
                "spotwise_ms": round(ours * 1e3, 4),
                "pandas_ms": round(theirs * 1e3, 4),
                "speedup": round(theirs / ours, 1),
                "candidates": d.candidates,
                "chosen": None if d.offering is None else _describe(d.offering),
                "same_choice": pb.same(d.expected_cost, base.choice(r)),
            }
        )
        progress(f"single decision {label}: {ours * 1e3:.3f} ms vs pandas {theirs * 1e3:.2f} ms")

    n = min(jobs_count, 1000) if quick else jobs_count
    queue = pb.pending_jobs(n)
    t0 = time.perf_counter()
    ours_cost = [pb.spotwise_choice(cat, r) for r in queue]
    t_ours = time.perf_counter() - t0
    progress(f"{n} jobs placed in {t_ours:.2f} s; running the pandas baseline ...")
    t0 = time.perf_counter()
    theirs_cost = [base.choice(r) for r in queue]  # every job: timed and checked
    t_theirs = time.perf_counter() - t0
    mismatches = sum(not pb.same(a, b) for a, b in zip(ours_cost, theirs_cost, strict=True))
    return {
        "benchmark": "placement",
        "quick": quick,
        "catalog_rows": len(rows),
        "offerings": len(offers),
        "load_s": round(t_load, 3),
        "catalog_build_s": round(t_cat, 3),
        "dataframe_build_s": round(t_df, 3),
        "single": single,
        "queue": {
            "jobs": n,
            "placed": sum(c is not None for c in ours_cost),
            "spotwise_s": round(t_ours, 4),
            "pandas_s": round(t_theirs, 4),
            "speedup": round(t_theirs / t_ours, 1),
            "spotwise_per_job_ms": round(t_ours / n * 1e3, 4),
            "pandas_measured_jobs": n,
            "mismatches": mismatches,
        },
        "targets": {"decision_ms": 2.0, "jobs_10k_s": 2.0},
    }


def _describe(o: object) -> str:
    return f"{o.cloud} {o.zone} {o.instance_type} {o.market.value} ${o.price_per_hour:.2f}/h"  # type: ignore[attr-defined]
