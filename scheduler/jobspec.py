"""The job file a user submits (TOML), validated into a JobSpec, and its hardware Requirements."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from providers.settings import parse_duration
from scheduler.errors import UserError, format_validation_error


class SpotPreference(StrEnum):
    PREFER = "prefer"
    ONLY = "only"
    NEVER = "never"


_GPU = re.compile(r"^\s*(?P<model>[A-Za-z0-9*_.-]+?)(?:-(?P<mem>\d+)GB)?\s*(?::\s*(?P<n>\d+))?\s*$")
ANY_GPU = {"ANY", "*"}


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One acceptable GPU shape: model (None = any model), count, minimum memory per GPU."""

    model: str | None
    count: int
    min_memory_gb: float = 0.0

    def __str__(self) -> str:
        what = self.model or "GPU"
        mem = f" (>= {self.min_memory_gb:g} GB)" if self.min_memory_gb else ""
        return f"{self.count}x {what}{mem}"


def parse_gpu(text: str) -> GpuSpec:
    """'A100:8' -> 8x A100; 'A100-80GB:8' adds a memory floor; 'any:1' accepts any model."""
    m = _GPU.match(text)
    if not m:
        raise ValueError(f"GPU spec {text!r} is not like 'A100:8' or 'H100-80GB:1'")
    model = m.group("model").upper()
    count = int(m.group("n") or 1)
    if count < 1:
        raise ValueError(f"GPU spec {text!r}: the count must be at least 1")
    return GpuSpec(
        model=None if model in ANY_GPU else model,
        count=count,
        min_memory_gb=float(m.group("mem") or 0),
    )


class JobSpec(BaseModel):
    """A job file. Unknown keys are errors so a typo never silently changes a job."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][\w.-]*$")]
    team: str = "default"
    command: Annotated[list[str], Field(min_length=1)]
    gpus: list[str] = Field(default_factory=lambda: ["any:1"])
    gpu_memory_gb: float = Field(default=0.0, ge=0)
    cpus: float = Field(default=0.0, ge=0)
    memory_gb: float = Field(default=0.0, ge=0)
    nodes: int = Field(default=1, ge=1, le=1)
    gpu_hours: float | None = Field(default=None, gt=0)
    deadline: datetime | timedelta | None = None
    max_price_per_hour: float | None = Field(default=None, gt=0)
    clouds: list[str] = Field(default_factory=list)
    regions: list[str] = Field(default_factory=list)
    spot: SpotPreference = SpotPreference.PREFER
    checkpoint: str | None = None
    checkpoint_interval: timedelta = timedelta(minutes=10)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("gpus", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("gpus")
    @classmethod
    def _valid_gpus(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("list at least one GPU shape, e.g. gpus = 'A100:8'")
        for g in v:
            parse_gpu(g)
        return v

    @field_validator("checkpoint_interval", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> timedelta:
        return parse_duration(v)

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, v: Any) -> Any:
        # "52h" is relative to submission; submit() turns it into a time on the daemon's clock.
        if isinstance(v, str) and not re.match(r"^\d{4}-", v):
            return parse_duration(v)
        return v

    @field_validator("deadline")
    @classmethod
    def _aware(cls, v: datetime | timedelta | None) -> datetime | timedelta | None:
        if isinstance(v, datetime) and v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        return v

    def deadline_at(self, submitted: datetime) -> datetime | None:
        if isinstance(self.deadline, timedelta):
            return submitted + self.deadline
        return self.deadline

    @field_validator("clouds", "regions")
    @classmethod
    def _lower(cls, v: list[str]) -> list[str]:
        return [s.strip().lower() for s in v]

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.command[0].strip() == "":
            raise ValueError("command: the first element must be the program to run")
        return self

    def gpu_specs(self) -> list[GpuSpec]:
        specs = [parse_gpu(g) for g in self.gpus]
        if self.gpu_memory_gb:
            specs = [
                GpuSpec(s.model, s.count, max(s.min_memory_gb, self.gpu_memory_gb)) for s in specs
            ]
        return specs


def load_jobspec(path: str | Path) -> JobSpec:
    """Read and validate a job file; every problem becomes one UserError naming file and key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such job file") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None
    return jobspec_from_dict(data, source=str(path))


def jobspec_from_dict(data: dict[str, Any], source: str = "<job>") -> JobSpec:
    from pydantic import ValidationError

    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e, source)) from None
