"""Benchmark: early signals and risk data, measured side by side in one run.

    python scripts/bench_early_signals.py [--runs 5] [-o json]

1. Signal to durable checkpoint, per cloud notice shape: the real trainer (the tiny model on
   the CPU, a local store) runs with each cloud's metadata fake on loopback (the ones the
   tests use: IMDSv2, GCE metadata with its hanging GET, Azure Scheduled Events) or the
   local market's notice file; once it has trained a few steps the fake signals, and the
   time until a new `latest` is durable is measured (for a notice, until the trainer has
   exited 75 after its final save; for an AWS rebalance recommendation, until its one early
   save is durable while training goes on). Each shape's window is printed beside it: AWS
   120 s, GCP 150 s with `preemption_notice` (30 s without), Azure's NotBefore (about 30 s),
   the local market's notice (its configured lead).
2. Prior vs no prior for cold pools, and 3. auto vs fixed checkpoint intervals: the replay
   on the test split (scheduler/lab/signals_bench.py; the prior is a stand-in derived from
   each trace's past, see there).

What this does not measure: signal to the next attempt running (scripts/bench_next_attempt.py,
with the real daemon on the local market, placing on the notice against after the end), and
anything on a real cloud.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.metadata_servers import (  # noqa: E402
    FakeAzureEvents,
    FakeGcpMetadata,
    FakeImds,
)
from tests.support.trainer_runs import env, tiny_args, write_notice  # noqa: E402

WINDOWS = {"aws": 120.0, "aws-rebalance": None, "gcp": 150.0, "azure": 30.0, "local": 30.0}


def _latest(ckpt: Path) -> str | None:
    try:
        return (ckpt / "latest").read_text().strip()
    except OSError:
        return None


def _progress_step(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / "progress.json").read_text()).get("step") or 0)
    except (OSError, ValueError):
        return 0


def one_run(shape: str, tmp: Path) -> float:
    """Seconds from the signal to the durable checkpoint it caused."""
    ckpt = tmp / shape
    fakes: dict[str, object] = {}
    extra: dict[str, str] = {}
    cloud = shape.split("-")[0]
    if cloud == "aws":
        fake: object = FakeImds()
        extra["SPOTWISE_AWS_IMDS_ENDPOINT"] = fake.endpoint  # type: ignore[attr-defined]
    elif cloud == "gcp":
        fake = FakeGcpMetadata()
        extra["SPOTWISE_GCP_METADATA_ENDPOINT"] = fake.endpoint  # type: ignore[attr-defined]
        extra["SPOTWISE_NOTICE_SECONDS"] = "150"
    elif cloud == "azure":
        fake = FakeAzureEvents()
        extra["SPOTWISE_AZURE_METADATA_ENDPOINT"] = fake.endpoint  # type: ignore[attr-defined]
    else:
        fake = None
        notice = tmp / f"{shape}-notice.json"
        extra["SPOTWISE_NOTICE_FILE"] = str(notice)
    fakes[shape] = fake
    argv = tiny_args(
        ckpt,
        training__steps=1_000_000,
        checkpoint__interval_steps=0,
        checkpoint__async_save=shape == "aws-rebalance",
        preemption__cloud="",
        preemption__poll_interval_seconds=0.05,
        training__step_delay_seconds=0.02,
    )
    if fake is not None:
        fake.__enter__()  # type: ignore[attr-defined]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *argv],
        cwd=ROOT,
        env=env(SPOTWISE_CLOUD=cloud, SPOTWISE_CHECKPOINT_URI="", **extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while _progress_step(ckpt) < 5:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{shape}: the trainer did not start")
            time.sleep(0.02)
        before = _latest(ckpt)
        signal: Callable[[], None]
        if shape == "aws-rebalance":
            signal = fake.recommend_rebalance  # type: ignore[attr-defined]
        elif fake is not None:
            signal = fake.preempt  # type: ignore[attr-defined]
        else:
            doc = json.dumps({"action": "terminate", "time": "2999-01-01T00:00:00Z"})
            signal = lambda: write_notice(notice, doc)  # noqa: E731
        t0 = time.monotonic()
        signal()
        if shape == "aws-rebalance":
            while _latest(ckpt) in (None, before):
                if time.monotonic() - t0 > 120:
                    raise RuntimeError("no early save")
                time.sleep(0.005)
            return time.monotonic() - t0
        proc.wait(timeout=120)
        took = time.monotonic() - t0
        if proc.returncode != 75 or _latest(ckpt) in (None, before):
            raise RuntimeError(f"{shape}: exit {proc.returncode}, latest {_latest(ckpt)}")
        return took
    finally:
        proc.kill()
        proc.wait()
        if fake is not None:
            fake.__exit__(None, None, None)  # type: ignore[attr-defined]


def notices(runs: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for shape in WINDOWS:
        times = []
        for i in range(runs):
            with tempfile.TemporaryDirectory() as d:
                times.append(one_run(shape, Path(d) / str(i)))
        out[shape] = {
            "runs": runs,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "max_s": max(times),
            "window_s": WINDOWS[shape],
            "all_s": [round(t, 3) for t in times],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = ap.parse_args()
    from scheduler.lab.replay.split import Split
    from scheduler.lab.signals_bench import interval_bench, prior_bench

    t0 = time.monotonic()
    doc: dict[str, object] = {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "notices": notices(args.runs),
        "prior": [vars(s) for s in prior_bench(Split.TEST)],
        "intervals": [vars(s) for s in interval_bench(Split.TEST)],
    }
    doc["seconds"] = round(time.monotonic() - t0, 1)
    if args.output == "json":
        print(json.dumps(doc, indent=1))
        return
    print(f"commit {doc['commit']}; {doc['machine']}; {doc['seconds']} s")
    print("signal -> durable checkpoint (s): shape, median, min, max, window, runs")
    for shape, r in doc["notices"].items():  # type: ignore[union-attr]
        print(f"  {shape:14} {r['median_s']:6.2f} {r['min_s']:6.2f} {r['max_s']:6.2f} "
              f"{r['window_s'] or '-'!s:>6} {r['runs']}")  # fmt: skip
    for title in ("prior", "intervals"):
        print(title)
        for s in doc[title]:  # type: ignore[union-attr]
            print(f"  {s['label']:20} n={s['n']} cost {s['cost_mean']:.2f}±{s['cost_ci']:.2f} "
                  f"finish {s['finish_mean']:.2f}±{s['finish_ci']:.2f}h misses {s['misses']} "
                  f"intr {s['interruptions']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
