"""The train/test split of the shipped traces.

Constants in the policies are tuned on TRAIN only; `spotwise bench deadline --sweep` and the
price-spike setting report on TEST (and say so). The published-protocol settings (single
region, multi region, SkyNomad, ADRS) use the windows their protocol fixes, which overlap
both halves: their output is labelled "protocol windows (train + test)".

- 2022 single-zone traces (27 days from 2022-10-26, the Can't Be Late period): zones split,
  us-west-2a = train, us-west-2b = test.
- The same eight 2022 series over the 37.8 days that followed (2022-11-28 to 2023-01-05,
  labelled "2022-12 ..."): test only, both zones. Added with the policy frozen,
  never used for tuning: the 2022 part of the test split had only four traces.
- 2023 nine-zone V100 trace (45.5 days): periods AND zones split. Train = the first half of
  the ticks on us-east-1a/1d, us-east-2a, us-west-2b; test = the second half on us-east-1c/1f,
  us-east-2b, us-west-2a/2c. (A test window may be preceded by history from the first half:
  that is what a running daemon would have seen, not an outcome.)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .datasets import cbl_2022, cbl_2022_later, v100_2023
from .trace import Trace


class Split(StrEnum):
    TRAIN = "train"
    TEST = "test"


ZONES_2022 = {Split.TRAIN: "us-west-2a", Split.TEST: "us-west-2b"}
ZONES_2023 = {
    Split.TRAIN: ("us-east-1a", "us-east-1d", "us-east-2a", "us-west-2b"),
    Split.TEST: ("us-east-1c", "us-east-1f", "us-east-2b", "us-west-2a", "us-west-2c"),
}
ZONE_SETS_2023 = {
    Split.TRAIN: (("us-east-1a", "us-east-1d"), ("us-east-2a", "us-west-2b"),
                  ZONES_2023[Split.TRAIN]),
    Split.TEST: (("us-east-1c", "us-east-2b", "us-west-2a"), ("us-east-1f", "us-west-2c"),
                 ZONES_2023[Split.TEST]),
}  # fmt: skip


@dataclass(frozen=True)
class Period:
    """A trace and the tick range [lo, hi) that windows of this split must lie in."""

    label: str
    trace: Trace
    lo: int
    hi: int
    multi_zone: bool


def periods(split: Split) -> list[Period]:
    """Single-zone traces first, then the multi-zone sets."""
    out = []
    for name, t in cbl_2022().items():
        if name.startswith(ZONES_2022[split]):
            out.append(Period(name, t, 0, t.n_ticks, False))
    if split is Split.TEST:
        for name, t in cbl_2022_later().items():
            out.append(Period(name, t, 0, t.n_ticks, False))
    full = v100_2023()
    lo, hi = half_2023(split, full.n_ticks)
    for zone in ZONES_2023[split]:
        out.append(Period(f"2023 {zone}", full.select((zone,)), lo, hi, False))
    for zones in ZONE_SETS_2023[split]:
        label = f"2023 {len(zones)} zones ({', '.join(zones)})"
        out.append(Period(label, full.select(zones), lo, hi, True))
    return out


def half_2023(split: Split, n_ticks: int) -> tuple[int, int]:
    """The tick range [lo, hi) of the split's half of the 2023 trace."""
    half = n_ticks // 2
    return (0, half) if split is Split.TRAIN else (half, n_ticks)


def describe(split: Split, only_2023: bool = False) -> str:
    """Which periods and zones a setting's windows come from; `only_2023` for the settings
    that use the split's part of the 2023 trace alone (gangs, price spikes)."""
    half = "first" if split is Split.TRAIN else "second"
    part = f"2023 {half} half on {', '.join(ZONES_2023[split])}"
    if only_2023:
        return f"{split.value} split: {part}"
    later = "; 2022-11-28..2023-01-05 on us-west-2a/2b" if split is Split.TEST else ""
    return f"{split.value} split: 2022 {ZONES_2022[split]} traces{later}; {part}"
