"""Rebuild the compact traces in this folder from the published files.

Usage (from the repo root):
    python -m scheduler.lab.replay.data.derive /path/to/shared/data/traces

Reads only; writes cbl_2022_usw2.npz, cbl_2022_usw2_later.npz and v100_2023_9zone.npz next
to this file, all in the AVAILABLE convention (True = spot obtainable at that tick).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from scheduler.lab.replay.trace import (
    Convention,
    gap_hours_from_times,
    load_availability_csv,
    load_fail_csv,
    load_json_trace,
)

HERE = Path(__file__).resolve().parent
CBL_NAMES = [f"us-west-2{z}_{g}_{n}" for z in "ab" for g in ("v100", "k80") for n in (1, 8)]
V100_ZONES = [
    "us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f",
    "us-east-2a", "us-east-2b", "us-west-2a", "us-west-2b", "us-west-2c",
]  # fmt: skip


def _save(file: str, names: list[str], rows: list[np.ndarray], **fields: ArrayLike) -> None:
    """One compact trace file: the series' names, their availability bit-packed along time
    (datasets._unpack reads it back), the tick count, then `fields` in the order given (the
    order is part of the bytes a rebuild must reproduce)."""
    np.savez_compressed(
        HERE / file,
        names=np.array(names),
        available=np.packbits(np.array(rows), axis=1),
        n_ticks=np.int64(len(rows[0])),
        **fields,  # type: ignore[arg-type]  # the stub fears one of them is allow_pickle
    )


def derive_cbl(root: Path) -> None:
    """2022 us-west-2a/2b traces (Can't Be Late protocol), cross-checked against raw CSVs."""
    rows, gap = [], None
    for name in CBL_NAMES:
        avail, g, _ = load_json_trace(
            root / "skypilot-spot-traces/availability/1-node/aws-10-26-2022" / f"{name}.json",
            Convention.AVAILABLE,
        )
        raw, times = load_fail_csv(
            root
            / "michaelvll-skypilot-spot-strategy/aws-availability-2022/2022-10-26T22-05"
            / f"{name}.txt"
        )
        if not np.array_equal(avail, raw):
            raise SystemExit(f"{name}: JSON and raw CSV disagree")
        measured = round(gap_hours_from_times(times) * 3600)
        if measured != g:
            raise SystemExit(f"{name}: gap_seconds {g} but timestamps say {measured}")
        gap = g
        rows.append(avail)
    _save("cbl_2022_usw2.npz", CBL_NAMES, rows, gap_seconds=np.float64(gap),
          start="2022-10-26T22:05:04Z")  # fmt: skip


LATER_2022_FOLDERS = ("2022-11-28T22-23", "2022-12-13T19-23")  # the raw CSVs' periods
SEAM_ROUNDS = range(0, 4)  # probe rounds that may be missing between them (two are)


def derive_cbl_later(root: Path) -> None:
    """The same eight 2022 series over the two probe periods that followed (2022-11-28 to
    2023-01-05), joined into one: they are not in spot-traces, so only the raw CSVs exist.
    The probe rounds missing where one period ends and the next begins (26 min apart at
    600 s rounds: two) are filled with the state before them, and their indices stored."""
    base = root / "michaelvll-skypilot-spot-strategy/aws-availability-2022"
    rows: list[np.ndarray] = []
    starts: set[str] = set()
    filled: set[int] = set()
    for name in CBL_NAMES:
        parts, last = [], None
        for folder in LATER_2022_FOLDERS:
            avail, times = load_fail_csv(base / folder / f"{name}.txt")
            steps = {round((b - a).total_seconds()) for a, b in itertools.pairwise(times)}
            if not steps <= {600, 601}:
                raise SystemExit(f"{folder}/{name}: probe rounds {sorted(steps)} s apart")
            if last is None:
                starts.add(times[0].isoformat())
            else:
                missing = round((times[0] - last[1]).total_seconds() / 600) - 1
                if missing not in SEAM_ROUNDS:
                    raise SystemExit(f"{folder}/{name}: {missing} probe rounds missing before it")
                at = sum(len(p) for p in parts)
                filled.update(range(at, at + missing))
                parts.append(np.full(missing, last[0]))
            parts.append(avail)
            last = (bool(avail[-1]), times[-1])
        rows.append(np.concatenate(parts))
    lengths = {len(r) for r in rows}
    if len(starts) != 1 or len(lengths) != 1:
        raise SystemExit(f"series not aligned: starts {sorted(starts)}, lengths {lengths}")
    _save(
        "cbl_2022_usw2_later.npz",
        CBL_NAMES,
        rows,
        gap_seconds=np.float64(600),
        start=starts.pop().replace("+00:00", "Z"),
        filled=np.array(sorted(filled), dtype=np.int64),
    )


def derive_v100(root: Path) -> None:
    """2023 p3.2xlarge traces in 9 zones, with the per-tick spot prices from skynomad."""
    sky = root / "skynomad-artifact/data"
    prices = json.loads((sky / "v100_spot_prices.json").read_text())
    rows, price_rows, gaps, starts = [], [], set(), set()
    for zone in V100_ZONES:
        avail, times = load_availability_csv(
            sky / "real/availability/2023-02-15/processed" / f"{zone}_v100_1.csv"
        )
        gaps.add(round(gap_hours_from_times(times) * 3600))
        starts.add(times[0].isoformat())
        rows.append(avail)
        series = np.asarray(prices[f"{zone}_v100_1"], dtype=np.float64)
        if len(series) != len(avail):
            raise SystemExit(f"{zone}: {len(series)} prices for {len(avail)} ticks")
        price_rows.append(series)
    if len(gaps) != 1 or len(starts) != 1:
        raise SystemExit(f"zones not aligned: gaps {gaps}, starts {starts}")
    _save(
        "v100_2023_9zone.npz",
        V100_ZONES,
        rows,
        spot_price=np.array(price_rows, dtype=np.float32),
        gap_seconds=np.float64(gaps.pop()),
        on_demand_price=np.float64(3.06),
        start=starts.pop(),
    )


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    root = Path(argv[0])
    try:
        derive_cbl(root)
        derive_cbl_later(root)
        derive_v100(root)
    except FileNotFoundError as e:  # a wrong folder: say which file, not a traceback
        print(f"{e.filename}: no such file (is {root} the shared traces folder?)", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main(sys.argv[1:])
