"""Shared pieces of provider configuration (validated by pydantic, read from TOML)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_ISO = TypeAdapter(timedelta)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> timedelta:
    """Accept "15s", "5m", "1.5h", "2d", "250ms", a bare number of seconds, or a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration like '15s' or '5m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"])
        if value.startswith("P"):  # ISO-8601, as pydantic serialises timedelta
            try:
                return _ISO.validate_python(value)
            except ValidationError:
                pass
    raise ValueError(f"expected a duration like '15s', '5m', '1h', got {value!r}")


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class StrictModel(BaseModel):
    """Config models reject unknown keys, so a typo is an error rather than a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
