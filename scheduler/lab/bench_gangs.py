"""What `spotwise bench gangs` measures: a gang that loses one node, resumed by replacing that
node (the others wait) against re-placing the gang whole (the others stop, N launch).

- **local**: the real daemon, CLI and trainer on the local market, for each gang size and
  each `[gangs] recovery` ("replace", "whole"), repeated. One run: a gang of N nodes (one
  trainer process each, gloo over loopback) trains; node 1 is interrupted the way the market
  takes a spot instance back (notice, grace, SIGTERM); the interval ends when training has
  resumed: the first step the resumed process group completes, i.e. the first line the
  trainer's metrics file gets after a "resumed from step" line appeared in a node's log.
  Its cost is each node row's price paid times its overlap with the interval (the rows
  `spotwise show -o json` prints: the waiting nodes, the lost one until it ended, the new
  ones from their launch). Every sample is kept; the summary is its distribution.
- **replay**: the deadline bench's gang setting (replay/bench_settings.gang: the 2023 V100
  trace, N x the price, each other node taken back on its own at the pool's rate) replayed
  under a policy twice with the same losses: each single-node loss re-placing the gang
  (trace.gang_trace, as the setting does) or replacing the node in place (sim.simulate's
  `node_losses`, trace.gang_losses). Pool-wide losses re-place the gang on both paths.

The local market boots a node in well under a second and has no image to pull, so its
figures are the scheduler's and the trainer's share of a recovery (decision, launch,
rendezvous, checkpoint load); a cloud adds its boot time to both paths, N boots to "whole".
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

STRATEGIES = ("replace", "whole")
RESUMED = re.compile(rb"resumed from step-(\d+)")
# Bounds of one local run, so a wedged run is a failed sample, never a hang.
START_S = 240.0
RESUME_S = 240.0
STEP_DELAY_S = 0.25


@dataclass(frozen=True, slots=True)
class Sample:
    """One local run: the interval from the loss to training resumed, and what it cost."""

    nodes: int
    strategy: str
    seconds: float | None  # None: not resumed within RESUME_S
    usd: float | None
    attempts: int  # 1: the gang kept its attempt (replace); 2: re-placed whole
    detail: str = ""


def distribution(values: Iterable[float]) -> dict[str, Any]:
    """n, mean, median, p10, p90, min and max of `values` (empty: n = 0 and no figures)."""
    xs = sorted(values)
    if not xs:
        return {"n": 0}
    return {
        "n": len(xs),
        "mean": statistics.fmean(xs),
        "median": statistics.median(xs),
        "p10": _quantile(xs, 0.1),
        "p90": _quantile(xs, 0.9),
        "min": xs[0],
        "max": xs[-1],
    }


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarise(samples: list[Sample]) -> list[dict[str, Any]]:
    """Per gang size and strategy: how many runs resumed, and the distributions."""
    out = []
    for n in sorted({s.nodes for s in samples}):
        for strategy in STRATEGIES:
            mine = [s for s in samples if s.nodes == n and s.strategy == strategy]
            if not mine:
                continue
            ok = [s for s in mine if s.seconds is not None and s.usd is not None]
            out.append({
                "nodes": n, "strategy": strategy, "runs": len(mine), "resumed": len(ok),
                "seconds": distribution(s.seconds for s in ok if s.seconds is not None),
                "usd": distribution(s.usd for s in ok if s.usd is not None),
                "kept_attempt": sum(s.attempts == 1 for s in ok),
            })  # fmt: skip
    return out


# ---- local market --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(home: Path, strategy: str) -> str:
    return f"""
[daemon]
state_dir = "{home}"
database_url = "sqlite:///{home}/spotwise.db"
checkpoint_root = "{(home / "ckpt").as_uri()}"
reconcile_interval = "0.3s"
price_interval = "1s"
accrue_interval = "0.5s"
leak_grace = "1h"
metrics_port = {_free_port()}

[providers.local]
state_dir = "{home}/market"
speedup = 1
grace_period = "0.3s"
kill_after = "3s"

[gangs]
recovery = "{strategy}"
"""


def _job(home: Path, nodes: int, metrics: Path) -> Path:
    cmd = [
        sys.executable, "-m", "trainer", "--nnodes", str(nodes), "--nproc-per-node", "1",
        "--config", "tiny", "--training.steps", "100000", "--checkpoint.interval_steps", "5",
        "--model.dropout", "0", "--data.num_workers", "0", "--checkpoint.async_save", "false",
        "--training.step_delay_seconds", str(STEP_DELAY_S), "--debug.metrics_file", str(metrics),
    ]  # fmt: skip
    job = home / "gang.toml"
    job.write_text(
        f'name = "gang-bench"\ngpus = "V100:1"\nnodes = {nodes}\ngpu_hours = 1\n'
        f'regions = ["us-east-2"]\ncommand = {json.dumps(cmd)}\n'
    )
    return job


class _Daemon:
    """A daemon process on one config, and the CLI beside it (JSON output)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.config = home / "spotwise.toml"
        self.proc: subprocess.Popen[bytes] | None = None

    def cli(self, *args: str) -> dict[str, Any]:
        r = subprocess.run(
            [sys.executable, "-m", "scheduler", *args, "-c", str(self.config), "-o", "json"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"spotwise {args[0]}: {r.stderr.strip()[-300:]}")
        return dict(json.loads(r.stdout))

    def start(self) -> None:
        log = (self.home / "daemon.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "daemon", "-c", str(self.config)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        end = time.monotonic() + 60
        while True:
            try:
                self.cli("status")
                return
            except RuntimeError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError("the daemon did not come up") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def job(self, job_id: str) -> dict[str, Any]:
        return next(r for r in self.cli("status")["jobs"] if r["id"] == job_id)


def _resumes(market: Path) -> int:
    """How many times a trainer on any node has resumed from a checkpoint so far."""
    total = 0
    for log in market.rglob("stderr.log"):
        try:
            total += len(RESUMED.findall(log.read_bytes()))
        except OSError:
            continue
    return total


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _epoch(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def interval_cost(detail: dict[str, Any], t0: float, t1: float) -> float:
    """What the nodes cost between t0 and t1 (epoch seconds): each node row's price paid times
    its overlap with the interval (a row still running counts to t1)."""
    usd = 0.0
    for a in detail["attempts"]:
        price = float(a.get("price_per_hour") or 0.0)
        for n in a.get("instances") or []:
            start = _epoch(n.get("started_at"))
            if start is None:
                continue
            end = _epoch(n.get("ended_at")) or t1
            usd += price * max(0.0, min(end, t1) - max(start, t0)) / 3600.0
    return usd


def local_run(nodes: int, strategy: str, workdir: Path) -> Sample:
    """One run on the local market (see the module docstring)."""
    from providers.local import LocalMarket, LocalSettings

    home = Path(tempfile.mkdtemp(prefix=f"gang-{nodes}-{strategy}-", dir=workdir))
    (home / "spotwise.toml").write_text(_config(home, strategy))
    metrics = home / "metrics.jsonl"
    d = _Daemon(home)
    market = LocalMarket(LocalSettings(state_dir=home / "market", speedup=1))
    d.start()
    job_id = ""
    try:
        job_id = str(d.cli("submit", str(_job(home, nodes, metrics)))["id"])
        end = time.monotonic() + START_S
        while True:
            row = d.job(job_id)
            if row["state"] == "RUNNING" and (row.get("progress_step") or 0) >= 6:
                break
            if time.monotonic() > end or row["state"] in ("FAILED", "CANCELLED"):
                return Sample(nodes, strategy, None, None, 0, f"not running: {row['state']}")
            time.sleep(0.3)
        attempt = d.cli("show", job_id)["attempts"][-1]
        lost = next(n["instance_id"] for n in attempt["instances"] if n["node"] == 1)
        before = _resumes(home / "market")
        t0 = time.time()
        market.interrupt(lost)
        seen_at_resume: int | None = None
        end = time.monotonic() + RESUME_S
        while time.monotonic() < end:
            if seen_at_resume is None and _resumes(home / "market") > before:
                seen_at_resume = _lines(metrics)
            if seen_at_resume is not None and _lines(metrics) > seen_at_resume:
                break
            time.sleep(0.05)
        else:
            return Sample(nodes, strategy, None, None, 0, "not resumed in time")
        t1 = time.time()
        detail = d.cli("show", job_id)
        return Sample(
            nodes, strategy, t1 - t0, interval_cost(detail, t0, t1), len(detail["attempts"])
        )
    finally:
        if job_id:
            try:
                d.cli("cancel", job_id)
                end = time.monotonic() + 30
                while d.job(job_id)["state"] != "CANCELLED" and time.monotonic() < end:
                    time.sleep(0.3)
            except (RuntimeError, subprocess.TimeoutExpired, StopIteration):
                pass
        d.stop()
        market.terminate([t.ref for t in market.list_tagged("spotwise")])


def local_samples(
    sizes: Iterable[int], runs: int, workdir: Path, step: Callable[[str], None]
) -> list[Sample]:
    """`runs` runs per gang size and strategy, interleaved (replace, whole, replace, ...) so
    that a machine's load drifting over the run weighs on both alike."""
    out = []
    plan = [(n, s) for n in sizes for _ in range(runs) for s in STRATEGIES]
    for i, (n, s) in enumerate(plan, 1):
        sample = local_run(n, s, workdir)
        out.append(sample)
        shown = f"{sample.seconds:.1f} s" if sample.seconds is not None else sample.detail
        step(f"[{i}/{len(plan)}] {n} nodes, {s}: {shown}")
    return out


# ---- replay --------------------------------------------------------------------------------


def replay(sizes: Iterable[int], quick: bool, policy: str = "spotwise") -> list[dict[str, Any]]:
    """The gang setting's cases for each size, replayed with each loss re-placing the gang
    and with each single-node loss replaced in place: per case the mean cost and finish
    time, deadline misses, and how many losses each path saw."""
    from scheduler.core.policy import get_policy
    from scheduler.lab.replay.bench_settings import GANG_SEED, gang
    from scheduler.lab.replay.datasets import v100_2023
    from scheduler.lab.replay.scenarios import HISTORY_HOURS
    from scheduler.lab.replay.sim import simulate
    from scheduler.lab.replay.trace import gang_losses, gang_trace

    full = v100_2023()
    out = []
    for nodes in sizes:
        for case in gang(quick, nodes=nodes).cases:
            base = full.select(case.trace.zones)
            priced, losses = gang_losses(base, nodes, GANG_SEED)
            whole = gang_trace(base, nodes, GANG_SEED)
            job = case.job
            length = math.ceil(job.deadline / whole.gap_hours - 1e-9)
            hist = round(HISTORY_HOURS / whole.gap_hours)
            paths: dict[str, list[Any]] = {s: [] for s in STRATEGIES}
            for s in case.starts:
                past = whole.window(max(0, s - hist), s - max(0, s - hist))
                paths["whole"].append(
                    simulate(whole.window(s, length), job, get_policy(policy), history=past)
                )
                paths["replace"].append(
                    simulate(priced.window(s, length), job, get_policy(policy), history=past,
                             node_losses=losses[:, s : s + length])
                )  # fmt: skip
            row: dict[str, Any] = {"nodes": nodes, "case": case.label, "windows": len(case.starts)}
            for name, outs in paths.items():
                row[name] = {
                    "mean_usd": statistics.fmean(o.cost for o in outs),
                    "usd": distribution(o.cost for o in outs),
                    "mean_finish_h": statistics.fmean(o.finish_time for o in outs),
                    "misses": sum(not o.met_deadline for o in outs),
                    "interruptions": sum(o.interruptions for o in outs),
                    "replacements": sum(o.replacements for o in outs),
                }
            w, r = row["whole"]["mean_usd"], row["replace"]["mean_usd"]
            row["saving"] = (w - r) / w if w else 0.0
            out.append(row)
    return out


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": sys.version.split()[0]}


def commit() -> str:
    try:
        r = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            timeout=10, check=False, cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def gangs_doc(
    sizes: list[int],
    runs: int,
    quick: bool,
    local: bool,
    step: Callable[[str], None],
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The whole benchmark as one JSON document (the table is scheduler/cli/bench.py's)."""
    started = time.perf_counter()
    samples: list[Sample] = []
    if local and runs > 0:
        with tempfile.TemporaryDirectory(prefix="spotwise-bench-gangs-") as tmp:
            samples = local_samples(sizes, runs, workdir or Path(tmp), step)
    return {
        "commit": commit(),
        "machine": machine(),
        "quick": quick,
        "local": {"samples": [asdict(s) for s in samples], "summary": summarise(samples)},
        "replay": replay(sizes, quick),
        "elapsed_s": time.perf_counter() - started,
    }


def gangs_table(doc: dict[str, Any]) -> list[str]:
    """`bench gangs`'s tables, 80 columns wide, and the lines that say what was measured."""
    out = [f"commit {doc['commit']}; {doc['machine']['cores']} CPUs; Python "
           f"{doc['machine']['python']}"]  # fmt: skip
    summary = doc["local"]["summary"]
    if summary:
        out += [
            "",
            "local market: from a node's loss to training resumed (median, p10-p90)",
            "{:>5} {:<8} {:>7} {:>8} {:>13} {:>9} {:>15}".format(
                "nodes", "recovery", "resumed", "median s", "p10-p90 s", "median $",
                "p10-p90 $",
            ),
        ]  # fmt: skip
        for r in summary:
            s, u = r["seconds"], r["usd"]
            if not s["n"]:
                out.append(f"{r['nodes']:>5} {r['strategy']:<8} {0:>3}/{r['runs']:<3}")
                continue
            out.append(
                "{:>5} {:<8} {:>3}/{:<3} {:>8.1f} {:>13} {:>9.4f} {:>15}".format(
                    r["nodes"], r["strategy"], r["resumed"], r["runs"], s["median"],
                    f"{s['p10']:.1f}-{s['p90']:.1f}", u["median"],
                    f"{u['p10']:.4f}-{u['p90']:.4f}",
                )
            )  # fmt: skip
    out += [
        "",
        "replay, the gang setting: mean cost per job (USD) and finish time (h)",
        "{:<18} {:>4} {:>9} {:>9} {:>7} {:>7} {:>7} {:>6}".format(
            "case", "runs", "whole $", "replace $", "saving", "whole h", "repl h", "misses"
        ),
    ]
    for r in doc["replay"]:
        w, p = r["whole"], r["replace"]
        out.append(
            "{:<18} {:>4} {:>9.2f} {:>9.2f} {:>6.1%} {:>7.1f} {:>7.1f} {:>6}".format(
                r["case"][:18], r["windows"], w["mean_usd"], p["mean_usd"], r["saving"],
                w["mean_finish_h"], p["mean_finish_h"], f"{w['misses']}/{p['misses']}",
            )
        )  # fmt: skip
    out.append("misses: deadline misses, whole/replace; saving: of whole's mean cost")
    return out
