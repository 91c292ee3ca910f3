"""`spotwise bench ...`: the benchmarks' options, progress lines and tables.

Each benchmark prints measured figures next to a baseline measured in the same run; what
they measure is in the lab (scheduler/lab: bench, bench_daemon, bench_cli), which never
imports the command line. Tables fit the terminal: a terminal narrower than a full table
gets its narrow form (fewer columns, two-line headers), a pipe always the full one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from scheduler.lab.bench import choose_settings, deadline_doc, placement_doc, rounded, run_settings

commands = typer.Typer()
bench_app = typer.Typer(
    help="Benchmarks against baselines measured in the same run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
commands.add_typer(bench_app, name="bench")
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
    from scheduler.lab.replay import bench_settings
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
    if windows is not None and not 1 <= windows <= bench_settings.MAX_SWEEP_WINDOWS:
        _err.print(f"--windows must be 1 to {bench_settings.MAX_SWEEP_WINDOWS}")
        raise typer.Exit(2)
    chosen = choose_settings(chosen_split, sweep, quick, windows)
    summary = _run_settings(chosen, quick, jobs)
    elapsed = time.perf_counter() - t0
    doc = deadline_doc(summary, elapsed, quick)
    doc["sweep"] = sweep
    if sweep or chosen_split is Split.TRAIN:
        doc["split"] = chosen_split.value
    if output is Output.json:
        print(json.dumps(rounded(doc)))
        return
    if sweep:
        narrow = _print_sweep(doc)
    else:
        shown = [_print_setting(res) for res in doc["settings"]]
        narrow = max((n for n in shown if n), default=None)  # the widest full table's
    if narrow:
        _out.print(narrow[1])
    _out.print(f"{sum(s['runs'] for s in doc['settings'])} windows in {elapsed:.1f} s")


def _run_settings(chosen: list, quick: bool, jobs: int) -> list:
    """Every case of every setting replayed (the lab's run_settings), with a step line."""
    try:  # the step line is cleared however the run ends (a traceback starts on its own line)
        return run_settings(chosen, quick, jobs, _step)
    finally:
        _steps_done()


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

    try:
        import pandas  # noqa: F401  (the baseline only)
    except ImportError:
        _err.print("the placement benchmark's baseline needs pandas: pip install pandas")
        raise typer.Exit(2) from None
    doc = placement_doc(quick, jobs_count, _progress)
    if output is Output.json:
        print(json.dumps(doc))
        return
    _print_placement(doc)


def _print_placement(doc: dict[str, Any]) -> None:
    single = doc["single"]
    table = Table(title=f"one placement decision ({doc['offerings']} offerings, median)")
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
        "per job ms",
        f"{q['spotwise_per_job_ms']:.3f}",
        f"{q['pandas_s'] / q['jobs'] * 1e3:.2f}",
        "",
    )
    _out.print(table)
    _out.print(
        f"placed {q['placed']}/{q['jobs']}; picks differing from the baseline: {q['mismatches']}"
        f"\nload {doc['load_s']:.1f} s, Catalog build {doc['catalog_build_s']:.2f} s, "
        f"DataFrame build {doc['dataframe_build_s']:.2f} s"
        "\ntargets: <= 2 ms per decision, 10,000 jobs <= 2 s"
    )


@bench_app.command("daemon")
def bench_daemon(
    quick: bool = typer.Option(False, "--quick", help="Small sizes (seconds, for tests)"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
    idle: float = typer.Option(20.0, help="Seconds of idle schedule to measure"),
    jobs: list[int] = typer.Option(
        [], "--jobs", "-n", help="Pending jobs per run (repeatable; default 100, 1000, 10000)"
    ),
    history: list[int] = typer.Option(
        [], "--history", help="Finished jobs already in the database (repeatable; 0, 10000)"
    ),
) -> None:
    """The daemon's own cost: CPU per pass and per job, status time, idle CPU and memory."""
    from scheduler.lab.bench_daemon import run, verdicts

    sizes = jobs or ([10, 100] if quick else [100, 1000, 10000])
    histories = history or ([0, 100] if quick else [0, 10000])
    rows = run(sizes, histories, 1.0 if quick else idle, 1 if quick else 3)
    if output == "json":
        typer.echo(
            json.dumps({"rows": [asdict(r) for r in rows], "verdicts": verdicts(rows)}, indent=2)
        )
        return
    cols = (
        "jobs",
        "history",
        "launch s",
        "ms/job",
        "steady s",
        "ms/job",
        "accrue s",
        "status ms",
        "st cpu ms",
        "st cli ms",
        "end s",
        "idle %",
        "RSS MB",
    )
    typer.echo(" ".join(f"{c:>9}" for c in cols))
    for r in rows:
        cells = (
            r.jobs,
            r.history,
            r.launch_pass_cpu_s,
            r.launch_per_job_ms,
            r.steady_pass_cpu_s,
            r.steady_per_job_ms,
            r.accrue_cpu_s,
            r.status_ms,
            r.status_cpu_ms,
            r.status_cli_ms,
            r.end_pass_cpu_s,
            r.idle_cpu_pct,
            r.rss_mb,
        )
        typer.echo(" ".join(f"{c:>9}" for c in cells))
    for v in verdicts(rows):
        typer.echo(v)


@bench_app.command("gangs")
def bench_gangs(
    output: OutputOpt = Output.table,
    quick: QuickOpt = False,
    nodes: Annotated[
        list[int], typer.Option("--nodes", "-n", help="Gang sizes (repeatable; default 2, 4)")
    ] = [],  # noqa: B006 (typer reads the default)
    runs: Annotated[
        int | None,
        typer.Option("--runs", help="Local runs per size and recovery (default 5, 1 --quick)"),
    ] = None,
    replay_only: Annotated[
        bool, typer.Option("--replay-only", help="Only the replay (no local runs)")
    ] = False,
) -> None:
    """A gang losing one node: replacing it against re-placing the gang whole, timed on the
    local market (loss to training resumed, and its cost) and costed in the replay."""
    from scheduler.lab.bench_gangs import gangs_doc, gangs_table

    sizes = sorted(set(nodes)) or [2, 4]
    if any(n < 2 or n > 8 for n in sizes):
        _err.print("spotwise bench gangs: --nodes takes 2 to 8 (the local market's largest gang)")
        raise typer.Exit(2)
    try:
        doc = gangs_doc(sizes, runs or (1 if quick else 5), quick, not replay_only, _step)
    finally:
        _steps_done()
    if output is Output.json:
        print(json.dumps(rounded(doc), indent=2))
        return
    for line in gangs_table(doc):
        _out.print(line, markup=False, highlight=False, soft_wrap=True)


@bench_app.command("cli")
def bench_cli(
    output: OutputOpt = Output.table,
    quick: QuickOpt = False,
    runs: Annotated[
        int | None, typer.Option("--runs", help="Runs of each case (default 20, 3 with --quick)")
    ] = None,
    jobs_count: Annotated[
        int | None,
        typer.Option("--jobs-count", help="Jobs in the large database (default 10,000)"),
    ] = None,
) -> None:
    """The command line's own cost: --version, --help, status and show as a person runs
    them (a new process each), beside bare `python -c pass` measured in the same run."""
    from scheduler.lab.bench_cli import LARGE_JOBS, run

    try:
        doc = run(
            runs or (3 if quick else 20),
            jobs_count or (500 if quick else LARGE_JOBS),
            progress=_step,
        )
    finally:
        _steps_done()
    if output is Output.json:
        print(json.dumps(doc, indent=2))
        return
    for line in cli_table(doc):
        _out.print(line, markup=False, highlight=False, soft_wrap=True)


def cli_table(doc: dict[str, Any]) -> list[str]:
    """`bench cli`'s table, 80 columns wide, and the lines that say what it measured."""
    line = "{:<22} {:>9} {:>7} {:>7} {:>9} {:>10} {:>4}"
    out = [
        f"spotwise command line: {doc['runs']} runs of each case, a new process each",
        line.format("case", "median ms", "p90 ms", "CPU ms", "over bare", "target", "met"),
    ]
    for c in doc["cases"]:
        if c["target_ms"] is not None:
            target = f"<={c['target_ms']:g} ms"
        elif c["target_over_bare_ms"] is not None:
            target = f"<=bare+{c['target_over_bare_ms']:g}"
        else:
            target = "-"
        over = "-" if c["over_bare_ms"] is None else f"{c['over_bare_ms']:+.0f}"
        met = {None: "-", True: "yes", False: "no"}[c["met"]]
        figures = (f"{c[k]:.0f}" for k in ("median_ms", "p90_ms", "cpu_ms"))
        out.append(line.format(c["case"], *figures, over, target, met))
    out += [
        "over bare: the case's median minus bare Python's; CPU: user+system, median",
        f"large: {doc['large_jobs']:,} jobs; Python {doc['python']}, {doc['cpus']} CPUs",
        f"program: {' '.join(doc['program'])}",
    ]
    return out


@bench_app.command("api")
def bench_api(
    clients: int = typer.Option(100, "--clients", help="Concurrent clients (threads)"),
    seconds: float = typer.Option(30.0, "--seconds", help="How long they submit and read"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """The API server under load beside the daemon: throughput, latency, no job lost."""
    from scheduler.lab.bench_api import run

    doc = run(clients, seconds)
    if output == "json":
        typer.echo(json.dumps(doc, indent=2))
        return
    typer.echo(
        f"{doc['clients']} clients for {doc['seconds']} s: {doc['requests']} requests, "
        f"{doc['per_second']}/s, {doc['errors']} errors; {doc['jobs_submitted']} jobs "
        f"submitted, {len(doc['jobs_lost'])} lost"
    )
    typer.echo(f"{'kind':>8} {'req':>7} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} "
               f"{'p99 ms':>8} {'max ms':>8} {'errors':>7}")  # fmt: skip
    for kind, k in [*doc["kinds"].items(), ("all", {**doc["all"], "requests": doc["requests"],
                    "per_second": doc["per_second"], "errors": doc["errors"]})]:  # fmt: skip
        typer.echo(
            f"{kind:>8} {k['requests']:>7} {k['per_second']:>7} {k['p50_ms']:>8} "
            f"{k['p95_ms']:>8} {k['p99_ms']:>8} {k['max_ms']:>8} {k['errors']:>7}"
        )
    if doc["errors"] or doc["jobs_lost"] or not doc["daemon_alive"]:
        raise typer.Exit(1)
