"""The `[providers.local]` config section."""

from __future__ import annotations

import difflib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from providers.local.trace import DEFAULT_TRACE, available_traces, load_trace
from providers.settings import Duration, StrictModel, parse_duration


def _offset_or_time(value: Any) -> timedelta | datetime:
    """A trace offset ("3h", 0) or an absolute time inside the trace (ISO-8601, UTC if naive)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        return parse_duration(value)
    except ValueError:
        pass
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return t if t.tzinfo else t.replace(tzinfo=UTC)
    raise ValueError(f"expected an offset like '6h' or an ISO time, got {value!r}")


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spotwise" / "local"


class LocalSettings(StrictModel):
    """Times in `grace_period`/`kill_after` are real seconds; the market clock runs `speedup`x."""

    state_dir: Path | None = None  # None: $XDG_STATE_HOME/spotwise/local
    # Market seconds per real second: 0.01 (a hundred times slower) to 10,000 (the 45-day
    # trace in about 6.5 minutes); beyond that the clocks' arithmetic overflows or stalls.
    speedup: float = Field(default=60.0, ge=0.01, le=10_000)
    trace: str = DEFAULT_TRACE
    trace_start: Annotated[timedelta | datetime, BeforeValidator(_offset_or_time)] = timedelta(0)
    grace_period: Duration = timedelta(seconds=10)  # notice -> SIGTERM
    kill_after: Duration = timedelta(seconds=10)  # SIGTERM -> SIGKILL
    clouds: list[str] | None = None  # subset of aws/gcp/azure offerings; None: all
    regions: list[str] | None = None  # subset of regions; None: all
    # The market is a simulator whose offerings carry real clouds' names: next to a real
    # cloud it is refused unless asked for (tests, demos of placement across both).
    beside_clouds: bool = False

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, v: Path | None) -> Path | None:
        if v is not None and not v.expanduser().is_absolute():
            raise ValueError(
                f"{str(v)!r} is relative: the daemon and each command would resolve it against "
                "the folder they were started in; use an absolute path or one starting with ~"
            )
        return v

    @field_validator("trace")
    @classmethod
    def _known_trace(cls, v: str) -> str:
        names = available_traces()
        if v not in names:
            raise ValueError(f"unknown trace {v!r}; shipped traces: {', '.join(names)}")
        return v

    @field_validator("clouds", "regions")
    @classmethod
    def _offered(cls, v: list[str] | None, info: Any) -> list[str] | None:
        """A subset the shipped catalog does not offer would leave the market empty."""
        if v is None:
            return v
        from providers.local.snapshot import load_catalog

        rows = load_catalog()
        field = "cloud" if info.field_name == "clouds" else "region"
        known = sorted({getattr(r, field) for r in rows})
        out = [x.strip().lower() for x in v]
        for x in out:
            if x not in known:
                hits = difflib.get_close_matches(x, known, n=1, cutoff=0.5)
                mean = f"did you mean {hits[0]!r}? " if hits else ""
                raise ValueError(
                    f"the local market has no {field} {x[:40]!r}; {mean}valid: {', '.join(known)}"
                )
        return out

    @model_validator(mode="after")
    def _start_inside_trace(self) -> LocalSettings:
        if isinstance(self.trace_start, datetime):
            t = load_trace(self.trace)
            end = t.start + timedelta(seconds=t.n_ticks * t.gap_seconds)
            if not t.start <= self.trace_start < end:
                raise ValueError(
                    f"trace_start {self.trace_start.isoformat()} is outside trace {self.trace} "
                    f"({t.start.isoformat()} .. {end.isoformat()})"
                )
        return self

    def resolved_state_dir(self) -> Path:
        return (self.state_dir or default_state_dir()).expanduser()
