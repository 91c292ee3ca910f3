"""Shared pieces of provider configuration (validated by pydantic, read from TOML)."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    TypeAdapter,
    ValidationError,
)

# Applied to a stripped string with fullmatch: no two adjacent unbounded runs, so it is linear.
_DURATION = re.compile(r"(\d{1,15}(?:\.\d{1,15})?)[ \t]*(ms|s|m|h|d)?")
_ISO = TypeAdapter(timedelta)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Nothing the daemon schedules needs longer; beyond it timedelta arithmetic overflows.
MAX_DURATION = timedelta(days=3650)
_MAX_TEXT = 64  # no duration spelling is longer


def shorten(value: Any, limit: int = 40) -> str:
    """repr() of a user's value for an error message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def _checked(seconds: float) -> timedelta:
    if not math.isfinite(seconds):
        raise ValueError("a duration must be a finite number")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError("a duration cannot be longer than 10 years ('3650d')")
    return timedelta(seconds=seconds)


def parse_duration(value: Any) -> timedelta:
    """Accept "15s", "5m", "1.5h", "2d", "250ms", a bare number of seconds, or a timedelta.

    Negative, non-finite and over-10-year durations are rejected with a ValueError.
    """
    if isinstance(value, timedelta):
        return _checked(value.total_seconds())
    if isinstance(value, bool):
        raise ValueError("expected a duration like '15s' or '5m'")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
        return _checked(seconds)
    if isinstance(value, str) and len(value) <= _MAX_TEXT:
        text = value.strip()
        m = _DURATION.fullmatch(text)
        if m:
            return _checked(float(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"])
        if text.startswith("P"):  # ISO-8601, as pydantic serialises timedelta
            try:
                parsed = _ISO.validate_python(text)
            except (ValidationError, OverflowError, ValueError):
                pass
            else:
                return _checked(parsed.total_seconds())
    raise ValueError(f"expected a duration like '15s', '5m', '1h', got {shorten(value)}")


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def min_duration(floor: timedelta) -> Any:
    """A Duration type that must be at least `floor` ("0s" makes no sense for an interval)."""
    shown = f"{floor.total_seconds():g}s"

    def check(v: timedelta) -> timedelta:
        if v < floor or v <= timedelta(0):
            raise ValueError(f"must be at least {shown}, got {v.total_seconds():g}s")
        return v

    return Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(check)]


# Intervals the daemon polls on (clock time): 0 would spin. 100 ms keeps fast test configs.
Interval = min_duration(timedelta(milliseconds=100))
# Waits and grace periods where zero makes no sense but short values are fine (tests).
PositiveDuration = min_duration(timedelta(milliseconds=1))


class StrictModel(BaseModel):
    """Config models reject unknown keys, so a typo is an error rather than a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
