"""Per pool, the interruption rate the daemon predicted against the one it then observed:
the report's calibration plot.

Predicted is the pool's prior (its cloud's risk data where the price poll recorded one, else
the configured `spot_interruption_prior`): what placement believed before the pool had any
history. Observed is interruptions per exposure hour as `poolstate` counts them (decayed the
same way for both). Only pools with exposure are shown; a perfectly calibrated prior puts
every point on the diagonal.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session, col, select

from scheduler.state.models import PoolState

# Pools with less exposure than this say too little to place on the plot.
MIN_EXPOSURE_HOURS = 1.0


@dataclass(frozen=True, slots=True)
class PoolCalibration:
    pool: str
    predicted: float  # per hour, the prior
    observed: float  # per hour
    interruptions: int
    exposure_hours: float
    source: str  # where the prediction came from

    def to_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool, "predicted_per_hour": self.predicted,
            "observed_per_hour": self.observed, "interruptions": self.interruptions,
            "exposure_hours": self.exposure_hours, "predicted_from": self.source,
        }  # fmt: skip


def load(s: Session, default_prior: float) -> list[PoolCalibration]:
    rows = s.exec(
        select(PoolState).where(col(PoolState.exposure_hours) >= MIN_EXPOSURE_HOURS)
    ).all()
    out = [
        PoolCalibration(
            p.pool,
            default_prior if p.prior_rate is None else p.prior_rate,
            p.interruptions / p.exposure_hours,
            p.interruptions,
            p.exposure_hours,
            p.prior_source or "config prior",
        )
        for p in rows
    ]
    return sorted(out, key=lambda c: c.pool)
