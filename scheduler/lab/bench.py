"""`spotwise bench ...`: benchmarks that print measured figures next to a baseline measured in
the same run. Mounted by the CLI as the `bench` sub-command."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

bench_app = typer.Typer(
    help="Benchmarks against baselines measured in the same run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_PIPED = not sys.stdout.isatty()
_out = Console(width=180 if _PIPED else None)  # piped: wide enough for tables
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


def _step(msg: str) -> None:
    """A step counter: a line each where stderr is a log; on a terminal one line rewritten
    in place and cut to its width (hundreds of ~100-column lines wrapped at 80)."""
    if not sys.stderr.isatty():
        _progress(msg)
        return
    try:
        width = os.get_terminal_size(sys.stderr.fileno()).columns or 80  # 0: size unknown
    except OSError:
        width = 80
    sys.stderr.write(f"\r{msg[: max(1, width - 1)]}\x1b[K")
    sys.stderr.flush()


def _steps_done() -> None:
    """Clear a terminal's step line, so the tables start on a clean screen line."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


SweepOpt = Annotated[
    bool, typer.Option("--sweep", help="Overhead x slack grid on the test split (online policies)")
]
SplitOpt = Annotated[
    str,
    typer.Option(
        "--split",
        help="test (report) or train (tuning); train runs the sweep, or without --sweep the "
        "split settings (price spikes, gangs), on the train split",
    ),
]

WindowsOpt = Annotated[
    int | None,
    typer.Option(
        "--windows",
        help="With --sweep: start windows per trace, task length and cell (default 2, 1 "
        "with --quick; more for tuning on the train split with less noise)",
    ),
]


def _run_settings(chosen: list, quick: bool, jobs: int) -> list:
    """Every case of every setting, in worker processes unless quick or one worker."""
    from scheduler.lab.replay.scenarios import ALL, collect, run_case

    tasks = [(si, case) for si, s in enumerate(chosen) for case in s.cases]
    results: dict[int, list] = {i: [] for i in range(len(chosen))}
    workers = jobs or min(4, os.cpu_count() or 1)
    done = 0
    try:  # the step line is cleared however the run ends (a traceback starts on its own line)
        if workers <= 1 or quick:
            for si, case in tasks:
                s = chosen[si]
                results[si].append(run_case(case, s.policies or ALL, s.dp_units))
                done += 1
                _step(f"[{done}/{len(tasks)}] {s.key}: {case.label}")
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
                    _step(f"[{done}/{len(tasks)}] {chosen[si].key}: {case.label}")
    finally:
        _steps_done()
    # keep case order stable whatever order the workers finished in
    order = {id(c): i for s in chosen for i, c in enumerate(s.cases)}
    out = []
    for i, s in enumerate(chosen):
        by_label = {c.label: order[id(c)] for c in s.cases}
        rs = sorted(results[i], key=lambda r: by_label.get(r.label, 0))
        out.append(collect(s, rs))
    return out


@bench_app.command()
def deadline(
    output: OutputOpt = Output.table,
    quick: QuickOpt = False,
    jobs: JobsOpt = 0,
    sweep: SweepOpt = False,
    split: SplitOpt = "test",
    windows: WindowsOpt = None,
) -> None:
    """Deadline policies replayed over real spot traces: cost, misses, score with 95% CI,
    ratio to optimal, worse-than-UP share and worst window against all-on-demand."""
    from scheduler.lab.replay import scenarios
    from scheduler.lab.replay.split import Split

    t0 = time.perf_counter()
    try:
        chosen_split = Split(split)
    except ValueError:
        _err.print("--split must be 'test' or 'train'")
        raise typer.Exit(2) from None
    if windows is not None and not sweep:
        _err.print("--windows applies to --sweep only (the other settings' windows are fixed)")
        raise typer.Exit(2)
    if windows is not None and not 1 <= windows <= scenarios.MAX_SWEEP_WINDOWS:
        _err.print(f"--windows must be 1 to {scenarios.MAX_SWEEP_WINDOWS}")
        raise typer.Exit(2)
    if sweep:
        chosen = scenarios.sweep(chosen_split, quick, windows)
    elif chosen_split is Split.TRAIN:  # the protocol settings' windows are fixed: not split
        chosen = scenarios.split_settings(chosen_split, quick)
    else:
        chosen = scenarios.settings(quick)
    summary = _run_settings(chosen, quick, jobs)
    elapsed = time.perf_counter() - t0
    doc = _deadline_doc(summary, elapsed, quick)
    doc["sweep"] = sweep
    if sweep or chosen_split is Split.TRAIN:
        doc["split"] = chosen_split.value
    if output is Output.json:
        print(json.dumps(_rounded(doc)))
        return
    if sweep:
        narrow = _print_sweep(doc)
    else:
        shown = [_print_setting(res) for res in doc["settings"]]
        narrow = max((n for n in shown if n), default=None)  # the widest full table's
    if narrow:
        _out.print(narrow[1])
    _out.print(f"{sum(s['runs'] for s in doc['settings'])} windows in {elapsed:.1f} s")


def _num(x: float) -> float | None:
    """JSON-safe (NaN -> null), and no "-0.0" for a figure that is zero but for float error
    (on-demand's score); rounded only on the way out (_rounded)."""
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


def _rounded(doc: Any, digits: int | None = None) -> Any:
    """`doc` with each figure named in _JSON_DIGITS rounded to its digits."""
    if isinstance(doc, dict):
        return {k: _rounded(v, _JSON_DIGITS.get(k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rounded(v, digits) for v in doc]
    if isinstance(doc, float) and digits is not None:
        return round(doc, digits) + 0.0
    return doc


def _deadline_doc(summary: list, elapsed: float, quick: bool) -> dict[str, Any]:
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
                from scheduler.lab.replay.scenarios import TRACE_KINDS

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
    cell's results by kind ("all" and TRACE_KINDS), as _deadline_doc computed them."""
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


def _fmt_ci(ci: list) -> str:
    lo, hi = ci
    return "-" if lo is None else f"[{lo:.1f}, {hi:.1f}]"


# A narrow form's tables: (title, or None for the full table's; the full table's columns kept).
Narrow = Sequence[tuple[str | None, Sequence[str]]]
# Where a narrow form was printed: the width the full table needs, and the line saying so.
Narrowed = tuple[int, str] | None

# Headers of the narrow forms, on two lines where one would not fit in 80 columns.
_NARROW_HEADERS = {
    "avg cost $": "avg\ncost $",
    "worse than UP": "worse\nthan UP",
    "worst / all-OD": "worst/\nall-OD",
    "uniform-progress": "uniform-\nprogress",
    "spotwise - best": "spotwise -\nbest",
    "misses (s/g/u)": "misses\n(s/g/u)",
}


def _table(title: str, cols: Sequence[str], rows: list[dict[str, str]], narrow: bool) -> Table:
    """The full table, or in a narrow form's shape: no outer frame and no padding at its edges
    (4 columns more for the cells) and two-line headers."""
    table = Table(title=title, show_edge=not narrow, pad_edge=not narrow)
    for col in cols:
        header = _NARROW_HEADERS.get(col, col) if narrow else col
        table.add_column(header, justify="left" if col == "policy" else "right")
    for row in rows:
        table.add_row(*(row[c] for c in cols))
    return table


def _print_table(
    title: str, cols: Sequence[str], cells: Sequence[Sequence[str]], narrow: Narrow
) -> Narrowed:
    """The full table where it fits; on a terminal narrower than it needs (rich would cut its
    cells to "…"), the narrow form's tables instead, and the line that says so is returned
    (printed once, under the last table). Piped output always gets the full table."""
    rows = [dict(zip(cols, c, strict=True)) for c in cells]
    full = _table(title, cols, rows, narrow=False)
    need = Measurement.get(_out, _out.options.update_width(10_000), full).maximum
    if _PIPED or need <= _out.width:
        width = _out.width
        _out.width = max(need, width)  # piped: never wrap a cell (print(width=) is capped)
        _out.print(full)
        _out.width = width
        return None
    for i, (sub_title, sub_cols) in enumerate(narrow):
        _out.print(_table(sub_title or title, sub_cols, rows, narrow=True))
        if i < len(narrow) - 1:
            _out.print()
    kept = {c for _, sub_cols in narrow for c in sub_cols}
    left_out = [c for c in cols if c not in kept]
    what = f"without {', '.join(left_out)}" if left_out else f"in {len(narrow)} tables"
    return need, (
        f"narrow form, {what}: a terminal of {need}+ columns, a pipe or -o json shows the "
        "full table"
    )


_SETTING_NARROW: Narrow = (
    (None, ("policy", "avg cost $", "misses", "score", "95% CI", "worse than UP",
            "worst / all-OD")),
)  # fmt: skip


def _print_setting(res: dict[str, Any]) -> Narrowed:
    """One setting's table and notes; returns the narrow form's line where it printed that."""
    cols = ("policy", "avg cost $", "misses", "score", "95% CI", "x optimal", "worse than UP",
            "worst / all-OD", "> all-OD", "ms/decision")  # fmt: skip
    cells = []
    for row in res["policies"]:
        ratio = row["ratio_to_optimal"]
        cells.append((
            row["policy"],
            f"{row['avg_cost_usd']:.2f}",
            str(row["deadline_misses"]),
            f"{row['score']:.1f}",
            _fmt_ci(row["score_ci95"]),
            "-" if ratio is None else f"{ratio:.3f}",
            f"{row['worse_than_up_pct']:.0f}%",
            f"{row['worst_vs_on_demand']:.3f}",
            f"{row['above_on_demand_pct']:.0f}%",
            "-" if row["ms_per_decision"] is None else f"{row['ms_per_decision']:.3f}",
        ))  # fmt: skip
    title = f"{res['title']}: {res['runs']} windows, {res['clusters']} clusters"
    narrow = _print_table(title, cols, cells, _SETTING_NARROW)
    d = res.get("spotwise_minus_best_baseline")
    if d:
        _out.print(
            f"spotwise - best of (greedy, UP): {d['score']:+.1f} points, 95% CI "
            f"{_fmt_ci(d['ci95'])}"
        )
    _out.print(f"windows: {res['windows_from']}")
    if res["published_check"]:
        _out.print(res["published_check"])
    pub = ", ".join(f"{k} {v:g}" for k, v in res["published"].items())
    unit = "score" if res["published_kind"] == "score" else "avg cost $"
    _out.print(f"published ({unit}): {pub}\n" if pub else "")
    return narrow


MISS_ORDER = ("spotwise", "greedy", "uniform-progress")


def _fmt_delta(d: dict[str, Any] | None) -> str:
    return "-" if not d else f"{d['score']:+.1f} {_fmt_ci(d['ci95'])}"


_SWEEP_NARROW: Narrow = (
    (None, ("overhead h", "slack", "windows", "spotwise - best", "misses (s/g/u)", "> UP",
            "worst/OD")),
    ("sweep: score per policy (spotwise's with its 95% CI)",
     ("overhead h", "slack", "greedy", "uniform-progress", "spotwise", "cold", "ms/dec")),
    ("sweep: spotwise - best (95% CI) by zones",
     ("overhead h", "slack", "single-zone", "multi-zone")),
)  # fmt: skip


def _print_sweep(doc: dict[str, Any]) -> Narrowed:
    """The sweep's table and notes; returns the narrow form's line where it printed that."""
    first = doc["settings"][0] if doc["settings"] else {}
    worst: dict[str, float] = {}
    for s in doc["settings"]:
        for r in s["policies"]:
            worst[r["policy"]] = max(worst.get(r["policy"], 0.0), r["worst_vs_on_demand"])
    title = (
        "sweep: score (95% CI) per overhead x deadline slack; tasks of 12, 48 and 96 h, "
        "single- and multi-zone"
    )
    cols = ("overhead h", "slack", "windows", "greedy", "uniform-progress", "spotwise",
            "cold", "spotwise - best", "single-zone", "multi-zone", "misses (s/g/u)",
            "> UP", "worst/OD", "ms/dec")  # fmt: skip
    cells = []
    for s in doc["settings"]:
        rows = {r["policy"]: r for r in s["policies"]}
        _, o, k = s["setting"].split()
        d = s["spotwise_minus_best_baseline"]
        sw = rows["spotwise"]
        cells.append((
            o.split("=")[1],
            k.split("=")[1] + "x",
            str(s["runs"]),
            f"{rows['greedy']['score']:.1f}",
            f"{rows['uniform-progress']['score']:.1f}",
            f"{sw['score']:.1f} {_fmt_ci(sw['score_ci95'])}",
            f"{rows['spotwise-cold']['score']:.1f}" if "spotwise-cold" in rows else "-",
            f"{d['score']:+.1f} {_fmt_ci(d['ci95'])}",
            *(_fmt_delta(s.get(f"spotwise_minus_best_{f}")) for f in ("single_zone", "multi_zone")),
            "/".join(str(rows[p]["deadline_misses"]) for p in MISS_ORDER),
            f"{sw['worse_than_up_pct']:.0f}%",
            f"{sw['worst_vs_on_demand']:.3f}",
            f"{sw['ms_per_decision']:.3f}",
        ))  # fmt: skip
    narrow = _print_table(title, cols, cells, _SWEEP_NARROW)
    if first:
        _out.print(
            f"windows: {first['windows_from']}; CI: bootstrap over traces / zone sets; "
            "'spotwise - best': our score minus the better of greedy and UP (per replicate), "
            "over all windows, the single-zone ones and the multi-zone ones; 'cold': spotwise "
            "with no warm-up history (a new daemon's first job of a shape); 'ms/dec': "
            "spotwise's wall time per decision tick, simulator loop and warm-up included; "
            "'> UP': share of windows where spotwise paid more than UP; 'worst/OD': spotwise's "
            "worst window's cost over all-on-demand"
        )
        _out.print(
            "worst window / all-on-demand over the sweep: "
            + ", ".join(f"{p} {v:.3f}" for p, v in worst.items())
        )
    if doc.get("sweep_average"):
        _out.print()
        avg = [
            {
                "overhead h": row["overhead"],
                "cells": str(row["cells"]),
                **{label: _fmt_delta(row.get(kind)) for kind, label in _KINDS},
            }
            for row in doc["sweep_average"]
        ]
        _out.print(
            _table(
                "sweep: spotwise - best averaged over the cells (95% CI)",
                ("overhead h", "cells", *(label for _, label in _KINDS)),
                avg,
                narrow=False,
            )
        )
        _out.print(
            "CI: each bootstrap replicate resamples the same traces and zone sets in every "
            "cell, and the cells' deltas are averaged per replicate"
        )
    return narrow


_KINDS = (("all", "all"), ("single_zone", "single-zone"), ("multi_zone", "multi-zone"))


JobsCountOpt = Annotated[int, typer.Option("--jobs-count", help="Pending jobs to place")]


@bench_app.command()
def placement(
    output: OutputOpt = Output.table, quick: QuickOpt = False, jobs_count: JobsCountOpt = 10_000
) -> None:
    """Placement speed on the full offline catalogs (AWS+GCP+Azure) vs a pandas baseline
    (grouped by GPU model once, then argmin), which also checks every pick."""
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
    try:
        import pandas  # noqa: F401  (the baseline only)
    except ImportError:
        _err.print("the placement benchmark's baseline needs pandas: pip install pandas")
        raise typer.Exit(2) from None
    t0 = time.perf_counter()
    base = pb.PandasBaseline(offers)
    t_df = time.perf_counter() - t0
    _progress(f"{len(rows)} catalog rows, {len(offers)} offerings loaded in {t_load:.1f} s")

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
        _progress(f"single decision {label}: {ours * 1e3:.3f} ms vs pandas {theirs * 1e3:.2f} ms")

    n = min(jobs_count, 1000) if quick else jobs_count
    queue = pb.pending_jobs(n)
    t0 = time.perf_counter()
    ours_cost = [pb.spotwise_choice(cat, r) for r in queue]
    t_ours = time.perf_counter() - t0
    _progress(f"{n} jobs placed in {t_ours:.2f} s; running the pandas baseline ...")
    t0 = time.perf_counter()
    theirs_cost = [base.choice(r) for r in queue]  # every job: timed and checked
    t_theirs = time.perf_counter() - t0
    mismatches = sum(not pb.same(a, b) for a, b in zip(ours_cost, theirs_cost, strict=True))
    doc: dict[str, Any] = {
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
    if output is Output.json:
        print(json.dumps(doc))
        return
    table = Table(title=f"one placement decision ({len(offers)} offerings, median)")
    for col in ("request", "spotwise ms", "pandas ms", "x faster", "candidates", "same pick"):
        table.add_column(col, justify="left" if col == "request" else "right")
    for s in single:
        table.add_row(
            s["request"],
            f"{s['spotwise_ms']:.3f}",
            f"{s['pandas_ms']:.2f}",
            f"{s['speedup']:.1f}",
            str(s["candidates"]),
            "yes" if s["same_choice"] else "NO",
        )
    _out.print(table)
    for s in single:
        _out.print(f"  {s['request']}: {s['chosen'] or 'nothing adequate'}")
    q = doc["queue"]
    table = Table(title=f"placing {q['jobs']} pending jobs (both sides: every job)")
    for col in ("", "spotwise", "pandas", "x faster"):
        table.add_column(col, justify="right")
    table.add_row(
        "total s", f"{q['spotwise_s']:.3f}", f"{q['pandas_s']:.2f}", f"{q['speedup']:.1f}"
    )
    table.add_row(
        "per job ms", f"{q['spotwise_per_job_ms']:.3f}", f"{q['pandas_s'] / n * 1e3:.2f}", ""
    )
    _out.print(table)
    _out.print(
        f"placed {q['placed']}/{q['jobs']}; picks differing from the baseline: {q['mismatches']}"
        f"\nload {t_load:.1f} s, Catalog build {t_cat:.2f} s, DataFrame build {t_df:.2f} s"
        "\ntargets: <= 2 ms per decision, 10,000 jobs <= 2 s"
    )


def _describe(o: object) -> str:
    return f"{o.cloud} {o.zone} {o.instance_type} {o.market.value} ${o.price_per_hour:.2f}/h"  # type: ignore[attr-defined]
