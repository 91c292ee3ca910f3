"""Benchmark: checkpoint save and load throughput per store, against a plain file copy.

    python scripts/bench_stores.py [--size-mb 64] [--repeats 3] [--stores local,s3,gs,az]

Starts the emulators the tests use on loopback (moto's server for S3, fake-gcs-server for
GCS, Azurite for Azure Blob Storage), then, in one run and on one machine, for each store:

- save: the trainer's own path (DCP into the staging directory, upload, ``latest`` as a
  conditional write), from the call until ``latest`` moved;
- load: download and DCP load into a model of the same shape;
- the baseline: the same number of bytes copied from one file to another on the local disk
  (``shutil.copyfile`` and fsync), and for a remote store, one object of that size uploaded
  and downloaded with the store's own client (what the transport alone gives).

Prints MB/s per store (median of the repeats, min and max beside it) and, with -o json, one
JSON document. An emulator is not the cloud: these figures compare the trainer's path with
the transport under it on this machine; they say nothing of a bucket's bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tests.support.store_emulators import site  # noqa: E402
from trainer.bench import build_state  # noqa: E402
from trainer.checkpoint import CheckpointManager, ModelOptimState  # noqa: E402
from trainer.distributed import DistInfo  # noqa: E402
from trainer.fence import Fence  # noqa: E402
from trainer.storage import open_store  # noqa: E402

ONE = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), owns_group=False)


def _copy_seconds(src: Path, dst: Path) -> float:
    t0 = time.perf_counter()
    shutil.copyfile(src, dst)
    with open(dst, "rb+") as f:
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def _transport(store, blob: Path, tmp: Path) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """One object of the checkpoint's size up and down with the store's client."""
    t0 = time.perf_counter()
    store.upload_file(blob, store._key("bench/blob"))
    up = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.download_file(store._key("bench/blob"), tmp / "blob.back")
    down = time.perf_counter() - t0
    store.delete_keys([store._key("bench/blob")])
    return up, down


def measure(kind: str, size_mb: int, repeats: int, tmp: Path) -> dict:
    found = site(kind, tmp / kind)
    os.environ.update(found.env)
    model, opt = build_state(size_mb * 1024 * 1024)
    state = {"app": ModelOptimState(model, opt)}
    store = open_store(found.uri, str(tmp / kind / "staging"))
    nbytes = 0
    saves, loads, ups, downs, copies = [], [], [], [], []
    blob = tmp / "blob.bin"
    for i in range(repeats):
        mgr = CheckpointManager(store, ONE, keep=1, fence=Fence(store, attempt=None))
        t0 = time.perf_counter()
        mgr.save(i + 1, state)
        saves.append(time.perf_counter() - t0)
        if not nbytes:
            nbytes = sum(p.stat().st_size for p in _step_files(store, i + 1, tmp))
            with open(blob, "wb") as f:
                f.write(os.urandom(nbytes))
        t0 = time.perf_counter()
        mgr.load(i + 1, lambda _: {"app": ModelOptimState(*build_state(size_mb * 1024 * 1024))})
        loads.append(time.perf_counter() - t0)
        copies.append(_copy_seconds(blob, tmp / "blob.copy"))
        if not store.is_local:
            up, down = _transport(store, blob, tmp)
            ups.append(up)
            downs.append(down)

    def rate(seconds: list[float]) -> dict | None:
        if not seconds:
            return None
        mbs = sorted(nbytes / 1e6 / s for s in seconds)
        return {"median": statistics.median(mbs), "min": mbs[0], "max": mbs[-1]}

    return {
        "store": kind,
        "bytes": nbytes,
        "repeats": repeats,
        "save_mb_s": rate(saves),
        "load_mb_s": rate(loads),
        "file_copy_mb_s": rate(copies),
        "transport_up_mb_s": rate(ups),
        "transport_down_mb_s": rate(downs),
    }


def _step_files(store, step: int, tmp: Path) -> list[Path]:  # type: ignore[no-untyped-def]
    """The saved step's files on local disk (for a remote store: downloaded once)."""
    local = store.local_dir(step) if store.is_local else store.download(step)
    return [p for p in local.iterdir() if p.is_file()]


def _fmt(r: dict | None) -> str:
    return "-" if r is None else f"{r['median']:8.1f} ({r['min']:.0f}-{r['max']:.0f})"


def main() -> int:
    ap = argparse.ArgumentParser(prog="python scripts/bench_stores.py")
    ap.add_argument("--size-mb", type=int, default=64, help="model + optimizer state")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stores", default="local,s3,gs,az")
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as t:
        results = [
            measure(kind, args.size_mb, args.repeats, Path(t)) for kind in args.stores.split(",")
        ]
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    doc = {
        "commit": commit,
        "machine": machine,
        "size_mb": args.size_mb,
        "results": results,
    }
    if args.output == "json":
        print(json.dumps(doc, indent=1))
        return 0
    print(f"commit {commit}; {doc['machine']}; state {args.size_mb} MB, {args.repeats} repeats")
    print("MB/s, median (min-max)")
    head = ("store", "save", "load", "file copy", "transport up", "transport down")
    print("{:<6} {:>18} {:>18} {:>18} {:>18} {:>18}".format(*head))
    for r in results:
        cells = [_fmt(r[k]) for k in ("save_mb_s", "load_mb_s", "file_copy_mb_s",
                                      "transport_up_mb_s", "transport_down_mb_s")]  # fmt: skip
        print("{:<6} {:>18} {:>18} {:>18} {:>18} {:>18}".format(r["store"], *cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
