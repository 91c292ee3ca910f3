"""The job file a user submits (TOML), validated into a JobSpec, and its hardware Requirements.

Everything a job can never run with is refused here with one line naming the key (and its
line in the file): unknown GPU models, clouds and regions, non-finite numbers, NUL bytes,
invalid env names, gangs whose min_nodes exceeds nodes. What needs the submission time (a
deadline already past) is `JobSpec.validate_for_submit(now)`; what needs the config (declared
teams) is `check_team`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from providers import gpus as gpu_registry
from providers.regions import CLOUDS, REGIONS, suggest_cloud, suggest_region
from providers.settings import MAX_DURATION, PositiveDuration, parse_duration, shorten
from scheduler.core.checkpointing import young_daly
from scheduler.core.errors import (
    UserError,
    clean,
    format_validation_error,
    unusable_values,
)
from trainer.contract import parse_uri

if TYPE_CHECKING:
    pass


class SpotPreference(StrEnum):
    PREFER = "prefer"
    ONLY = "only"
    NEVER = "never"


ANY_GPU = {"ANY", "*"}
# No machine in any shipped catalog has more GPUs; a job needing more can never be placed.
MAX_GPUS_PER_NODE = 16
# The largest gang any adapter launches in one all-or-nothing request (EC2's MAX_GANG).
MAX_NODES = 64
_COUNT = re.compile(r"\d{1,6}")
_TIMES = re.compile(r"(.{1,100}?)\s{0,3}[xX*]\s{0,3}(\d{1,6})")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_TEAM = "default"


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One acceptable GPU shape: model (None = any model), count, minimum memory per GPU.

    `model` is canonical (providers.gpus): 'A100-80GB:8' is model 'A100', 80 GB minimum.
    """

    model: str | None
    count: int
    min_memory_gb: float = 0.0

    def __str__(self) -> str:
        what = self.model or "GPU"
        mem = f" (>= {self.min_memory_gb:g} GB)" if self.min_memory_gb else ""
        return f"{self.count}x {what}{mem}"


def parse_gpu(text: str) -> GpuSpec:
    """'A100:8' -> 8x A100; 'A100-80GB:8' adds a memory floor; 'any:1' accepts any model.

    Model names go through providers.gpus, so every cloud's spelling ('nvidia-tesla-v100',
    'V100-32GB', 'NVIDIA A100 80GB') means the same model.
    """
    if not isinstance(text, str) or not text.strip() or len(text) > 100:
        raise ValueError(f"GPU spec {shorten(text)} is not like 'A100:8' or 'H100-80GB:1'")
    name, sep, count_text = text.strip().partition(":")
    name, count_text = name.strip(), count_text.strip()
    if not sep:
        m = _TIMES.fullmatch(name)
        if m and (m.group(1).strip().upper() in ANY_GPU or gpu_registry.parse_name(m.group(1))):
            raise ValueError(
                f"GPU spec {text!r} is not like 'A100:8' "
                f"(did you mean {m.group(1).strip() + ':' + m.group(2)!r}?)"
            )
        count_text = "1"
    if not _COUNT.fullmatch(count_text):
        raise ValueError(f"GPU spec {shorten(text)}: the count after ':' must be a whole number")
    count = int(count_text)
    if count < 1:
        raise ValueError(f"GPU spec {text!r}: the count must be at least 1")
    if count > MAX_GPUS_PER_NODE:
        raise ValueError(
            f"GPU spec {text!r}: no machine has more than {MAX_GPUS_PER_NODE} GPUs "
            "(the count is per node; use nodes = N for more machines)"
        )
    bare, any_mem = gpu_registry.split_memory(name)
    if bare.upper() in ANY_GPU:  # 'any:1', 'any-80GB:8' (any model with at least 80 GB)
        return GpuSpec(model=None, count=count, min_memory_gb=any_mem or 0.0)
    parsed = gpu_registry.parse_name(name)
    if parsed is None:
        hints = [f"{h}:{count}" for h in gpu_hints(name)]
        mean = f" (did you mean {' or '.join(repr(h) for h in hints)}?)" if hints else ""
        raise ValueError(
            f"GPU spec {shorten(text)}: unknown GPU model {shorten(name)}{mean}; known models: "
            f"{', '.join(gpu_registry.known_models())}, or 'any'"
        )
    model, mem = parsed
    info = gpu_registry.get_model(model)
    if mem is not None and info is not None and mem > max(info.memory_gb) + 0.5:
        sizes = ", ".join(f"{v:g}" for v in info.memory_gb)
        raise ValueError(f"GPU spec {text!r}: {model} comes with {sizes} GB, not {mem:g} GB")
    return GpuSpec(model=model, count=count, min_memory_gb=mem or 0.0)


# Letters typed for digits: 'A10O' is A100 typed with a letter O.
_DIGIT_LOOKALIKES = str.maketrans("OoIl", "0011")


def gpu_hints(name: str, limit: int = 2) -> list[str]:
    """Known models a mistyped name may mean, likeliest first: the name with look-alike
    letters read as digits, then the closest spellings ('A10O': A100, then A10)."""
    out: list[str] = []
    swapped = gpu_registry.parse_name(name.translate(_DIGIT_LOOKALIKES))
    if swapped is not None:
        out.append(swapped[0])
    bare = gpu_registry.split_memory(name)[0].upper()
    models = gpu_registry.known_models()
    for hit in difflib.get_close_matches(bare, models, n=limit + 1, cutoff=0.5):
        if hit not in out:
            out.append(hit)
    single = gpu_registry.suggest(name)
    if single and single not in out:
        out.append(single)
    return out[:limit]


def normalise_team(name: str) -> str:
    """Team names are case-insensitive and trimmed: ' Research ' is 'research'."""
    team = name.strip().lower()
    if not re.fullmatch(r"[a-z0-9][\w.-]{0,62}", team):
        raise ValueError(
            f"team {shorten(name)} is not a valid team name (a letter or digit, then letters, "
            "digits, '_', '.', '-'; at most 63)"
        )
    return team


def _did_you_mean(word: str, options: list[str] | tuple[str, ...]) -> str:
    hits = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {hits[0]!r}?)" if hits else ""


class JobSpec(BaseModel):
    """A job file. Unknown keys are errors so a typo never silently changes a job."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][\w.-]*$")]
    team: str = DEFAULT_TEAM
    command: Annotated[list[str], Field(min_length=1)]
    gpus: list[str] = Field(default_factory=lambda: ["any:1"])
    gpu_memory_gb: float = Field(default=0.0, ge=0)
    cpus: float = Field(default=0.0, ge=0)
    memory_gb: float = Field(default=0.0, ge=0)
    # A gang: `nodes` instances of one pool, `gpus` on each, joined into one process group.
    nodes: int = Field(default=1, ge=1, le=MAX_NODES)
    # Elastic gangs: continue on as few as `min_nodes` when `nodes` cannot be placed now.
    min_nodes: int | None = Field(default=None, ge=1)
    gpu_hours: float | None = Field(default=None, gt=0, le=1_000_000)
    deadline: datetime | timedelta | None = None
    max_price_per_hour: float | None = Field(default=None, gt=0)
    clouds: list[str] = Field(default_factory=list)
    regions: list[str] = Field(default_factory=list)
    spot: SpotPreference = SpotPreference.PREFER
    checkpoint: str | None = None
    # Continue from the checkpoints a finished job left at `checkpoint` (refused otherwise).
    reuse_checkpoint: bool = False
    # How often the job checkpoints (its own setting, told to spotwise), or "auto": the
    # daemon sets it from the pool's hazard and the measured save time
    # (scheduler.core.checkpointing) and the trainer follows.
    checkpoint_interval: PositiveDuration | Literal["auto"] = timedelta(minutes=10)
    # "on-price": a running attempt moves when another pool is clearly cheaper
    # (scheduler.core.price_moves)
    migrate: Literal["never", "on-price"] = "on-price"
    # A wall-clock cap from the job's first start: past it the job is stopped (checkpointed)
    # and FAILED, whatever its progress.
    max_duration: PositiveDuration | None = None
    # Interruptions recovered before the job fails ([daemon] max_preemptions when unset); 0:
    # no recovery, the first interruption fails the job.
    max_preemptions: int | None = Field(default=None, ge=0, le=1_000_000)
    # After this many interruptions within `fallback_window`, the rest runs on on-demand
    # (jobs without a deadline: a deadline job's policy decides that itself).
    fallback_after: int | None = Field(default=None, ge=1, le=1_000)
    fallback_window: PositiveDuration = timedelta(hours=24)
    # On an interruption notice, place the next attempt at once, while the old instance still
    # saves (single-node jobs). The command must wait for the store to name its attempt
    # ($SPOTWISE_CLAIM_WAIT; `python -m trainer` does), so it is asked for, not assumed.
    place_on_notice: bool = False
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("checkpoint_interval", mode="before")
    @classmethod
    def _interval(cls, v: Any) -> Any:
        if v == "auto":
            return v
        try:
            d = parse_duration(v)
        except ValueError as e:
            raise ValueError(f"{e}, or 'auto' (as often as the pool deserves)") from None
        if d < timedelta(milliseconds=1):
            raise ValueError(f"must be at least 1ms, got {d.total_seconds():g}s, or 'auto'")
        return d

    @field_validator("team")
    @classmethod
    def _team(cls, v: str) -> str:
        return normalise_team(v)

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, v: str | None) -> str | None:
        if v is not None:
            parse_uri(v, absolute=True)  # ValueError: one line naming the accepted forms
        return v

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, v: Any) -> Any:
        """A string is not run by a shell: say how to write it as the argv list it means."""
        if isinstance(v, str):
            import json
            import shlex

            try:
                words = shlex.split(v)
            except ValueError:
                words = v.split()
            example = json.dumps(words or ["python", "train.py"])
            raise ValueError(
                f"give the command as a list of arguments, e.g. command = {example} "
                "(a string is not split by a shell)"
            )
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if v[0].strip() == "":
            raise ValueError("the first element must be the program to run")
        for arg in v:
            if "\x00" in arg:
                raise ValueError("an argument contains a NUL character (\\u0000)")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _ENV_NAME.fullmatch(name):
                fixed = re.sub(r"[^A-Za-z0-9_]", "_", name.partition("=")[0])
                fixed = fixed if _ENV_NAME.fullmatch(fixed) else "_" + fixed
                raise ValueError(
                    f"{shorten(name)} is not a valid environment variable name (letters, digits "
                    f"and '_', not starting with a digit; did you mean {shorten(fixed)}?)"
                )
            if "\x00" in value:
                raise ValueError(f"the value of {name} contains a NUL character (\\u0000)")
        return v

    @field_validator("min_nodes")
    @classmethod
    def _min_nodes(cls, v: int | None, info: Any) -> int | None:
        nodes = info.data.get("nodes")
        if v is not None and isinstance(nodes, int) and v > nodes:
            raise ValueError(
                f"{v} is more than nodes = {nodes} (min_nodes is how few nodes an elastic "
                "gang may continue on)"
            )
        return v

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

    @field_validator("gpu_memory_gb")
    @classmethod
    def _gpu_memory(cls, v: float) -> float:
        top = gpu_registry.max_memory_gb()
        if v > top:
            raise ValueError(f"no GPU has more than {top:g} GB of memory")
        return v

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, v: Any) -> Any:
        # "52h" (or a number of seconds) is relative to submission; submit() turns it into a
        # time on the daemon's clock. An absolute time is ISO-8601 or a TOML date-time.
        if isinstance(v, str) and not re.match(r"^\s*\d{4}-", v):
            return parse_duration(v)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return parse_duration(v)
        if isinstance(v, time):
            raise ValueError("a deadline needs a date, e.g. 2026-12-24T18:00:00Z, or '52h'")
        if isinstance(v, date) and not isinstance(v, datetime):
            return datetime(v.year, v.month, v.day, tzinfo=UTC)
        return v

    @field_validator("deadline")
    @classmethod
    def _aware(cls, v: datetime | timedelta | None) -> datetime | timedelta | None:
        if isinstance(v, datetime) and v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        if isinstance(v, timedelta):
            if v <= timedelta(0):
                raise ValueError("a relative deadline must be > 0, e.g. '52h'")
            if v > MAX_DURATION:
                raise ValueError("a deadline cannot be more than 10 years away")
        return v

    def deadline_at(self, submitted: datetime) -> datetime | None:
        if isinstance(self.deadline, timedelta):
            return submitted + self.deadline
        return self.deadline

    @field_validator("clouds")
    @classmethod
    def _clouds(cls, v: list[str]) -> list[str]:
        out = [s.strip().lower() for s in v]
        for c in out:
            if c not in CLOUDS:
                hint = suggest_cloud(c)
                mean = f"did you mean {hint!r}? " if hint else ""
                extra = " (the local market sells aws, gcp and azure offerings)" * (c == "local")
                raise ValueError(
                    f"unknown cloud {shorten(c)}; {mean}valid: {', '.join(CLOUDS)}{extra}"
                )
        return out

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: list[str], info: Any) -> list[str]:
        out = [s.strip().lower() for s in v]
        clouds = [c for c in (info.data.get("clouds") or []) if c in REGIONS]
        known = set().union(*(REGIONS[c] for c in clouds or CLOUDS))
        for r in out:
            if r not in known:
                hint = suggest_region(r, clouds or None)
                mean = f"; did you mean {hint!r}?" if hint else ""
                where = f" of {', '.join(clouds)}" if clouds else ""
                raise ValueError(
                    f"unknown region {shorten(r)}{mean} (regions are names like 'us-east-1', "
                    f"'us-central1', 'eastus'{where})"
                )
        return out

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.fallback_after is not None and self.deadline is not None:
            raise ValueError(
                "fallback_after is for jobs without a deadline: a deadline job's policy "
                "moves it to on-demand when its slack runs out"
            )
        if self.fallback_after is not None and self.spot is SpotPreference.ONLY:
            raise ValueError("fallback_after needs on-demand, which spot = 'only' forbids")
        for spec in self.gpu_specs():
            info = gpu_registry.get_model(spec.model) if spec.model else None
            if info and spec.min_memory_gb > max(info.memory_gb) + 0.5:
                sizes = ", ".join(f"{v:g}" for v in info.memory_gb)
                raise ValueError(
                    f"gpu_memory_gb = {spec.min_memory_gb:g}: {spec.model} comes with {sizes} GB"
                )
        return self

    @property
    def auto_checkpoint(self) -> bool:
        return self.checkpoint_interval == "auto"

    def interval_at(self, rate_per_hour: float, save_seconds: float = 0.0) -> timedelta:
        """The checkpoint interval on a pool with this interruption rate: the job's own, or
        Young/Daly's for "auto"."""
        if isinstance(self.checkpoint_interval, timedelta):
            return self.checkpoint_interval
        return young_daly(save_seconds, rate_per_hour)

    @property
    def fewest_nodes(self) -> int:
        """How few nodes this job may run on (`nodes` unless it is elastic)."""
        return self.min_nodes or self.nodes

    def gpu_specs(self) -> list[GpuSpec]:
        specs = [parse_gpu(g) for g in self.gpus]
        if self.gpu_memory_gb:
            specs = [
                GpuSpec(s.model, s.count, max(s.min_memory_gb, self.gpu_memory_gb)) for s in specs
            ]
        return specs

    def validate_for_submit(self, now: datetime, source: str = "<job>") -> None:
        """The checks that need the submission time; raise UserError (one line) if it fails.

        A deadline that is already past (or falls at the moment of submission) can never be
        met: refuse the job instead of queueing it. One more than 10 years away is refused too
        (clock arithmetic on it would overflow).
        """
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        due = self.deadline_at(now)
        if due is not None and due <= now:
            raise UserError(
                f"{clean(source, 200)}: deadline: {due.isoformat()} is already past (now "
                f"{now.isoformat(timespec='seconds')}); give a later time or a duration like '52h'"
            )
        if due is not None and due - now > MAX_DURATION:
            raise UserError(
                f"{clean(source, 200)}: deadline: {due.isoformat()} is more than 10 years away"
            )


class StoredSpecInvalid(ValueError):
    """A job's stored spec that today's validation refuses (written by an older spotwise, or
    naming a GPU, region or cloud the registry no longer knows): the message is one line."""


def load_stored(spec_json: str) -> JobSpec:
    """The JobSpec a job was submitted with, as stored; StoredSpecInvalid (one line, with
    every problem) when it no longer validates."""
    try:
        return JobSpec.model_validate_json(spec_json)
    except ValidationError as e:
        problems = format_validation_error(e, "stored spec").splitlines()
        what = "; ".join(p.removeprefix("stored spec: ") for p in problems)
        raise StoredSpecInvalid(
            f"its stored job spec no longer validates ({clean(what, 300)}); "
            "submit the job file again"
        ) from None


def jobspec_from_dict(
    data: dict[str, Any], source: str = "<job>", lines: dict[str, int] | None = None
) -> JobSpec:
    problems = unusable_values(data, lines or {}, source)
    if problems:
        raise UserError("\n".join(problems))
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise UserError(
            format_validation_error(e, source, lines, model=JobSpec, data=data)
        ) from None
    except RecursionError:
        raise UserError(f"{clean(source, 200)}: values are nested too deeply") from None
