"""Benchmark: signal to the next attempt running, placing on the notice against waiting for
the end, measured side by side in one run on the local market.

    python scripts/bench_next_attempt.py [--runs 3] [--shapes aws,gcp,azure] [-o json]

For each cloud's notice shape (its window: AWS 120 s, GCP 150 s with `preemption_notice`,
Azure 30 s; on the local market the window is the market's `grace_period`, in real seconds)
a real daemon (`spotwise daemon`, speed-up 1) runs the real trainer (`python -m trainer`,
the tiny model on the CPU, which saves on the notice and exits 75). Each run submits one job,
waits until it trains, then has the market announce an interruption, and times from that
call to (1) the next attempt's instance running (the daemon's attempt row RUNNING) and
(2) the next trainer training again (progress.json written by the next attempt after its
resume). Runs alternate between a job with `place_on_notice = true` (the next attempt is
placed on the notice, its store handed over once the old attempt has ended) and one without
(today's path: placed once the old attempt has ended), so both see the same machine load.
Every run's job is cancelled before the next.

What this does not measure: a real cloud's launch time (the local market starts a process
in well under a second; a cloud takes one to several minutes, which is what placing on the
notice hides), nor a large model's save (here about half a second).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.lab.bench_gangs import distribution  # noqa: E402
from tests.support.trainer_runs import TINY  # noqa: E402

SHAPES = {"aws": 120, "gcp": 150, "azure": 30}  # notice window, seconds
MODES = ("on notice", "after end")
LIMIT_S = 90  # one phase of one run; past it the run is counted as failed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(home: Path, window: int) -> str:
    return f"""
[daemon]
state_dir = "{home}"
database_url = "sqlite:///{home}/spotwise.db"
checkpoint_root = "{(home / "ckpt").as_uri()}"
reconcile_interval = "0.3s"
price_interval = "5s"
accrue_interval = "1s"
leak_grace = "1h"
handover_grace = "5s"
metrics_port = {_free_port()}

[providers.local]
state_dir = "{home}/market"
speedup = 1
grace_period = "{window}s"
kill_after = "5s"
"""


def _command() -> list[str]:
    values: dict[str, object] = dict(TINY)
    values.update(
        {
            "training.steps": 100_000,
            "training.step_delay_seconds": 0.05,
            "checkpoint.interval_steps": 100_000,
            "preemption.cloud": "local",
        }
    )  # fmt: skip  (the market's notice file)
    argv = [sys.executable, "-m", "trainer"]
    for key, value in values.items():
        argv += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


class Daemon:
    def __init__(self, home: Path, window: int) -> None:
        self.home = home
        home.mkdir(parents=True)
        self.config = home / "spotwise.toml"
        self.config.write_text(_config(home, window))
        self.log = (home / "daemon.log").open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "daemon", "-c", str(self.config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 90
        while self.cli("status", check=False).returncode != 0:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the daemon did not come up")
            time.sleep(0.2)

    def cli(
        self, *args: str, check: bool = True, as_json: bool = True
    ) -> subprocess.CompletedProcess[str]:
        fmt = ["-o", "json"] if as_json else []
        r = subprocess.run(
            [sys.executable, "-m", "scheduler", *args, "-c", str(self.config), *fmt],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"spotwise {' '.join(args)}: {r.stderr.strip()}")
        return r

    def attempts(self, job_id: str) -> list[tuple[int, str, str | None]]:
        db = sqlite3.connect(f"file:{self.home / 'spotwise.db'}?mode=ro", uri=True, timeout=5)
        try:
            return db.execute(
                "SELECT number, state, instance_id FROM attempt WHERE job_id = ? ORDER BY number",
                (job_id,),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _progress(ckpt: Path) -> dict[str, Any]:
    try:
        return json.loads((ckpt / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def _until(pred, what: str) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + LIMIT_S
    while True:
        if pred():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {what}")
        time.sleep(0.02)


def one_run(d: Daemon, market: Any, on_notice: bool, n: int) -> tuple[float, float]:
    """Seconds from the interruption to the next attempt running, and to it training."""
    job = d.home / f"job-{n}.toml"
    job.write_text(
        f'name = "bench-{n}"\ngpus = "V100:1"\ngpu_hours = 1\n'
        f"place_on_notice = {str(on_notice).lower()}\ncommand = {json.dumps(_command())}\n"
    )
    job_id = json.loads(d.cli("submit", str(job)).stdout)["id"]
    ckpt = d.home / "ckpt" / job_id
    try:
        _until(lambda: (_progress(ckpt).get("step") or 0) >= 5, "the first attempt trains")
        (first,) = d.attempts(job_id)
        t0 = time.monotonic()
        if not market.interrupt(first[2]):
            raise RuntimeError(f"the market did not interrupt {first[2]}")
        running = _until(
            lambda: any(a[0] == 2 and a[1] == "RUNNING" for a in d.attempts(job_id)),
            "the next attempt runs",
        )
        training = _until(
            lambda: (p := _progress(ckpt)).get("attempt") == "2" and p.get("state") == "running",
            "the next attempt trains",
        )
        return running - t0, training - t0
    finally:
        d.cli("cancel", job_id, check=False, as_json=False)
        _until(lambda: all(a[1] == "ENDED" for a in d.attempts(job_id)), "the job's attempts end")


def _summary(times: list[float]) -> dict[str, Any]:
    d = distribution(times)  # the gang benchmark's figures: n 0 has none
    figures = {f"{k}_s": round(d[k], 3) for k in ("median", "p10", "p90") if k in d}
    return {"n": d["n"], **figures, "all_s": [round(t, 3) for t in times]}


def bench(runs: int, shapes: dict[str, int]) -> dict[str, Any]:
    from providers.local import LocalMarket, LocalSettings

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, window in shapes.items():
            d = Daemon(Path(tmp) / shape, window)
            market = LocalMarket(LocalSettings(state_dir=d.home / "market", speedup=1))
            got: dict[str, dict[str, list[float]]] = {
                m: {"running": [], "training": []} for m in MODES
            }
            failed = dict.fromkeys(MODES, 0)
            try:
                for i in range(runs * 2):
                    mode = MODES[i % 2]
                    try:
                        running, training = one_run(d, market, mode == MODES[0], i)
                    except RuntimeError as e:  # a phase past LIMIT_S: counted, not fatal
                        print(f"{shape} {mode} run {i}: {e}", file=sys.stderr)
                        failed[mode] += 1
                        continue
                    got[mode]["running"].append(running)
                    got[mode]["training"].append(training)
            finally:
                d.stop()
                # A bench stopped part-way (Ctrl-C, a timeout's SIGTERM) leaves no instance
                # running: the market's supervisors outlive the daemon, as a cloud's would.
                market.terminate([r.ref for r in market.list_tagged("spotwise") if r.live])
            out[shape] = {
                "window_s": window,
                **{
                    mode: {**{k: _summary(v) for k, v in got[mode].items()}, "failed": failed[mode]}
                    for mode in MODES
                },
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per shape and mode")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="of: " + ", ".join(SHAPES))
    ap.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = ap.parse_args()
    # A timeout's SIGTERM unwinds like Ctrl-C, so each shape's `finally` stops what it ran.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shapes = {s: SHAPES[s] for s in args.shapes.split(",")}
    t0 = time.monotonic()
    doc: dict[str, Any] = {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "next_attempt": bench(args.runs, shapes),
    }
    doc["seconds"] = round(time.monotonic() - t0, 1)
    if args.output == "json":
        print(json.dumps(doc, indent=1))
        return
    print(f"commit {doc['commit']}; {doc['machine']}; {doc['seconds']} s")
    print("signal -> next attempt (s): shape, window, mode, running median p10 p90, "
          "training median p10 p90, n, failed")  # fmt: skip
    for shape, r in doc["next_attempt"].items():
        for mode in MODES:
            run, train = r[mode]["running"], r[mode]["training"]
            print(
                f"  {shape:6} {r['window_s']:4d} s  {mode:10} "
                f"{_figures(run)}   {_figures(train)}  {run['n']} {r[mode]['failed']}"
            )


def _figures(summary: dict[str, Any]) -> str:
    return " ".join(
        f"{summary[k]:6.2f}" if k in summary else f"{'-':>6}"
        for k in ("median_s", "p10_s", "p90_s")
    )


if __name__ == "__main__":
    main()
