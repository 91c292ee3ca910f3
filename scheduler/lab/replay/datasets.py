"""The traces shipped with the package (see data/README.md for origin and derivation)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from .trace import Trace

DATA = Path(__file__).resolve().parent / "data"

# Prices the Can't-Be-Late protocol bills the 2022 traces at (p3.2xlarge list / spot).
CBL_ON_DEMAND = 3.06
CBL_SPOT = 0.9731


def _unpack(doc: np.lib.npyio.NpzFile) -> np.ndarray:
    n = int(doc["n_ticks"])
    return np.unpackbits(doc["available"], axis=1, count=n).astype(bool)


@cache
def cbl_2022() -> dict[str, Trace]:
    """The eight 2022 us-west-2a/2b single-zone traces, keyed like 'us-west-2a_v100_1'."""
    return _single_zone("cbl_2022_usw2.npz")


LATER_2022_LABEL = "2022-12"  # names the later 2022 series apart from the Can't Be Late ones


@cache
def cbl_2022_later() -> dict[str, Trace]:
    """The same eight series over the following 37.8 days (2022-11-28 to 2023-01-05), keyed
    like '2022-12 us-west-2a_v100_1': probes the Can't Be Late traces do not include, held
    out for testing. The two probe rounds filled where the periods meet (the file's `filled`)
    are replayed like the others: two ticks in 5446 need no special case."""
    return _single_zone("cbl_2022_usw2_later.npz", LATER_2022_LABEL + " ")


def _single_zone(file: str, prefix: str = "") -> dict[str, Trace]:
    """One Trace per series of a 2022 file, billed at the Can't Be Late protocol's prices
    (the probes recorded availability only), keyed by `prefix` + the series name."""
    with np.load(DATA / file) as doc:
        names = [str(n) for n in doc["names"]]
        avail = _unpack(doc)
        gap = float(doc["gap_seconds"]) / 3600.0
    out = {}
    for i, series in enumerate(names):
        zone, name = series.split("_")[0], prefix + series
        a = avail[i : i + 1]
        out[name] = Trace((zone,), gap, a, np.full(a.shape, CBL_SPOT), CBL_ON_DEMAND, name=name)
    return out


@cache
def v100_2023() -> Trace:
    """The nine-zone 2023 p3.2xlarge trace with per-tick spot prices (195 s ticks)."""
    with np.load(DATA / "v100_2023_9zone.npz") as doc:
        zones = tuple(str(n) for n in doc["names"])
        return Trace(
            zones,
            float(doc["gap_seconds"]) / 3600.0,
            _unpack(doc),
            doc["spot_price"].astype(np.float64),
            float(doc["on_demand_price"]),
            name="v100-2023",
        )
