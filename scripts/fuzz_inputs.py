"""A fuzz campaign over config and job files, run by hand (the test suite runs a short one).

    PYTHONPATH=$PWD python scripts/fuzz_inputs.py --n 2000                 # in-process
    PYTHONPATH=$PWD python scripts/fuzz_inputs.py --n 100 --cli            # the real CLI
    PYTHONPATH=$PWD python scripts/fuzz_inputs.py --n 500 --seed 7 --keep /tmp/fuzz-fails

Each file is random bytes, a mutated valid file, or TOML built from the real keys with hostile
values (inf/nan, NUL, markup, huge numbers and durations, deep nesting, 200 KB values). It is
read as a config (`load_config` / `spotwise check-config`) or as a job (`load_jobspec` /
`spotwise submit`, against a throwaway SQLite database). Counted: files that ended in anything
but a UserError (in-process) or a "Traceback" / an exit code other than 0 and 2 (CLI), and
files that took longer than --hang seconds; through the CLI also refusals that were not one
'error: ' line per problem (unformatted). Exit status 1 if any were found.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

CONFIG_KEYS = {
    "daemon": [
        "database_url", "owner", "reconcile_interval", "price_interval", "accrue_interval",
        "unavailable_ttl", "avoid_after_interrupt", "leak_grace", "launch_timeout", "stop_grace",
        "max_attempts", "log_level", "metrics_port", "checkpoint_root", "teams",
    ],
    "providers.local": [
        "state_dir", "speedup", "trace", "trace_start", "grace_period", "kill_after", "clouds",
        "regions",
    ],
    "providers.aws": ["enabled", "regions", "endpoint", "price_interval"],
    "providers.gcp": ["enabled", "endpoint"],
    "policy": ["deadline_policy", "restart_overhead", "spot_interruption_prior"],
    "[budgets]": ["name", "scope", "limit_usd", "window", "hard"],
}  # fmt: skip
JOB_KEYS = [
    "name", "team", "command", "gpus", "gpu_memory_gb", "cpus", "memory_gb", "nodes",
    "gpu_hours", "deadline", "max_price_per_hour", "clouds", "regions", "spot", "checkpoint",
    "checkpoint_interval", "env",
]  # fmt: skip
GOOD_CONFIG = """[daemon]
reconcile_interval = "15s"
teams = ["research"]

[providers.local]
speedup = 10

[[budgets]]
name = "research"
scope = "team:research"
limit_usd = 100
"""
GOOD_JOB = """name = "fine-tune"
team = "research"
command = ["python", "train.py"]
gpus = ["A100-80GB:8", "H100:8"]
deadline = "52h"
clouds = ["aws", "gcp"]
env = { WANDB_MODE = "offline" }
"""
ATOMS = [
    "0", "-1", "1", "7", "65536", "1e308", "-1e308", "inf", "-inf", "nan", "+nan", "0.0", "-0.0",
    "true", "false", "9" * 40, "1979-05-27T07:32:00Z", "1979-05-27", "07:32:00",
    "2999-12-31T23:59:59", '"0s"', '"0"', '"5m"', '"1.5h"', '"250ms"', '"1e400s"',
    '"99999999999999d"', '"3651d"', '"P99999999D"', '"PT0S"', '"-5s"', '"soon"', '""', '" "',
    '"[/]"', '"[red]x[/]"', '"\\u0000"', '"a\\u0000b"', '"A100x8"', '"A100-80GB:8"', '"any:1"',
    '"V100:8"', '"A100:0"', '"A100:99999999999"', '"gpc"', '"local"', '"us-east-1a"',
    '"team:Research"', '"team:"', '"global"', '"postgresql://u:hunter2@h/db"', '"sqlite:///x"',
    '"Research"', '"A=B"', '"\\ud7ff"', "'literal \\n'", '"""multi\nline"""', "[]", "{}",
    '["gpc"]', '["a", 1]', "[[1], [2]]", '{ "A=B" = "1" }', '{ X = "\\u0000" }', '{ "" = 1 }',
]  # fmt: skip


def _value(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if roll < 0.55 or depth > 3:
        return rng.choice(ATOMS)
    if roll < 0.65:
        n = rng.choice([1, 2, 50, 2000, 60_000])
        return "[" * n + rng.choice(["1", ""]) + "]" * n
    if roll < 0.72:
        size = rng.choice([1_000, 50_000, 200_000])
        fill = rng.choice([" ", "1", "a", "[", "a ", "1 ", "\\u0000", "-", ":"])
        return (
            '"'
            + rng.choice(["", "1", "A"])
            + fill * (size // len(fill))
            + rng.choice(["", "x", '!"', "s"]).rstrip('"')
            + '"'
        )
    if roll < 0.75:  # a multi-line string whose lines look like table headers or keys
        fill = rng.choice(["[" + " " * 200_000, "[[" + " a" * 50_000, " " * 100_000 + "= 1"])
        return '"""\n' + fill + '\n"""'
    if roll < 0.78:
        return "9" * rng.choice([300, 5_000])
    if roll < 0.9:
        return "[" + ", ".join(_value(rng, depth + 1) for _ in range(rng.randint(0, 4))) + "]"
    items = (f"{_key(rng)} = {_value(rng, depth + 1)}" for _ in range(rng.randint(0, 3)))
    return "{ " + ", ".join(items) + " }"


def _key(rng: random.Random, known: list[str] | None = None) -> str:
    roll = rng.random()
    if known and roll < 0.75:
        return rng.choice(known)
    return rng.choice(['"[/]"', '"a.b"', "x", '"\\u0000"', '"k=v"', '""', "A_B", "1", '"é"'])


def toml_config(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 5)):
        section = rng.choice(list(CONFIG_KEYS))
        header = f"[[{section[1:-1]}]]" if section.startswith("[") else f"[{section}]"
        out.append(header if rng.random() > 0.05 else "[" + _key(rng) + "]")
        for _ in range(rng.randint(0, 5)):
            out.append(f"{_key(rng, CONFIG_KEYS[section])} = {_value(rng)}")
    return "\n".join(out) + "\n"


def toml_job(rng: random.Random) -> str:
    keys = {"name": '"x"', "command": '["python", "t.py"]'}
    for _ in range(rng.randint(0, 6)):
        keys[_key(rng, JOB_KEYS)] = _value(rng)
    if rng.random() < 0.2:
        keys.pop(rng.choice(list(keys)))
    return "".join(f"{k} = {v}\n" for k, v in keys.items())


def mutate(rng: random.Random, text: str) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        pos = rng.randrange(len(data) + 1)
        if op < 0.3 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op < 0.6:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op < 0.8:
            data[pos:pos] = rng.choice([b"[/]", b"\x00", b"\xff\xfe", b"inf", b"nan", b"=", b"["])
        else:
            del data[pos : pos + rng.randint(1, 20)]
    return bytes(data)


def make_file(rng: random.Random) -> tuple[str, bytes]:
    """(kind, content): kind 'config' or 'job'."""
    kind = rng.choice(["config", "job"])
    roll = rng.random()
    if roll < 0.1:
        return kind, bytes(rng.randrange(256) for _ in range(rng.randint(0, 400)))
    if roll < 0.35:
        return kind, mutate(rng, GOOD_CONFIG if kind == "config" else GOOD_JOB)
    text = toml_config(rng) if kind == "config" else toml_job(rng)
    return kind, text.encode("utf-8", "surrogatepass")


class Hang(Exception):
    pass


def _alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise Hang


def run_in_process(path: Path, kind: str, hang_s: float) -> tuple[str, str]:
    from scheduler.core.errors import UserError
    from scheduler.state.files import load_config, load_jobspec

    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, hang_s)
    try:
        (load_config if kind == "config" else load_jobspec)(path)
        return "ok", ""
    except UserError:
        return "refused", ""
    except Hang:
        return "hang", ""
    except BaseException as e:
        tb = traceback.format_exception(e)
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} @ {tb[-2].strip()[:300]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_cli(path: Path, kind: str, hang_s: float, workdir: Path) -> tuple[str, str]:
    cfg = workdir / "cli.toml"
    if not cfg.exists():
        cfg.write_text(f'[daemon]\ndatabase_url = "sqlite:///{workdir}/db.sqlite"\n')
    args = (
        ["check-config", str(path)] if kind == "config" else ["submit", str(path), "-c", str(cfg)]
    )
    env = dict(os.environ, XDG_STATE_HOME=str(workdir / "state"))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "scheduler", *args],
            capture_output=True,
            timeout=hang_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "hang", ""
    err = r.stderr.decode(errors="replace")
    if "Traceback" in err or r.returncode not in (0, 2):
        return "traceback", f"rc={r.returncode} " + err.strip().splitlines()[-1][
            :300
        ] if err else ""
    if r.returncode == 2 and not all(x.startswith("error: ") for x in err.splitlines()):
        return "unformatted", err[:200]  # refused, but not one 'error: ' line per problem
    return ("ok" if r.returncode == 0 else "refused"), ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cli", action="store_true", help="through `python -m scheduler`")
    ap.add_argument("--hang", type=float, default=None, help="seconds (5 in-process, 30 CLI)")
    ap.add_argument("--keep", type=Path, help="copy failing files here")
    a = ap.parse_args()
    hang_s = a.hang or (30.0 if a.cli else 5.0)
    rng = random.Random(a.seed)
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i in range(a.n):
            kind, data = make_file(rng)
            path = work / f"{i:05d}-{kind}.toml"
            path.write_bytes(data)
            if a.cli:
                outcome, why = run_cli(path, kind, hang_s, work)
            else:
                outcome, why = run_in_process(path, kind, hang_s)
            counts[outcome] += 1
            if outcome in ("traceback", "hang"):
                reasons[why.split(" @ ")[0][:120] or outcome] += 1
                if a.keep:
                    a.keep.mkdir(parents=True, exist_ok=True)
                    (a.keep / path.name).write_bytes(data)
            path.unlink()
    summary = {
        "files": a.n,
        "mode": "cli" if a.cli else "in-process",
        "seed": a.seed,
        "tracebacks": counts["traceback"],
        "hangs": counts["hang"],
        "refused": counts["refused"],
        "unformatted": counts["unformatted"],
        "accepted": counts["ok"],
        "seconds": round(time.monotonic() - t0, 1),
        "top_failures": reasons.most_common(8),
    }
    print(json.dumps(summary, indent=2))
    return 1 if counts["traceback"] or counts["hang"] or counts["unformatted"] else 0


if __name__ == "__main__":
    sys.exit(main())
