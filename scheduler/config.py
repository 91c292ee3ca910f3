"""The daemon's TOML configuration, read with tomllib into typed, validated models.

A bad file gets one message naming the file, the key and (where known) the line; nothing here
prints a traceback for a user's mistake.
"""

from __future__ import annotations

import os
import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from providers.aws.settings import AwsSettings
from providers.gcp.settings import GcpSettings
from providers.local.settings import LocalSettings
from providers.settings import Duration, StrictModel
from scheduler.budget import BudgetRule, Window
from scheduler.errors import UserError, format_validation_error

DEFAULT_PATHS = ("./spotwise.toml", "/etc/spotwise/spotwise.toml")


def default_state_dir() -> Path:
    """$STATE_DIRECTORY (systemd's StateDirectory=), else the XDG state directory."""
    systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spotwise"


class DaemonSettings(StrictModel):
    # The database, checkpoints and local instances hang off one directory, found the same
    # way by the daemon and the CLI: this key, else $STATE_DIRECTORY, else the XDG one.
    state_dir: Path | None = None
    database_url: str | None = None  # default: sqlite:///<state_dir>/spotwise.db
    owner: str = Field(default="spotwise", pattern=r"^[A-Za-z0-9_.-]+$")
    reconcile_interval: Duration = timedelta(seconds=5)
    price_interval: Duration = timedelta(minutes=5)
    accrue_interval: Duration = timedelta(seconds=30)
    # How long a pool stays out of placement after a capacity error.
    unavailable_ttl: Duration = timedelta(minutes=15)
    # How long a job avoids the pool that just interrupted it.
    avoid_after_interrupt: Duration = timedelta(minutes=30)
    # Tagged instances with no live attempt are terminated after this long.
    leak_grace: Duration = timedelta(minutes=5)
    # An attempt that never reports an instance within this time is failed and retried.
    launch_timeout: Duration = timedelta(minutes=10)
    # Time a job needs to checkpoint and stop; budgets keep this much headroom.
    stop_grace: Duration = timedelta(minutes=2)
    # Attempts that may be lost or rejected before the job fails; preemptions draw on their
    # own budget (None: unlimited), as Ray Train's max_failures / max_preemption_failures.
    max_attempts: int = Field(default=3, ge=1)
    max_preemptions: int | None = Field(default=None, ge=0)
    # A job whose reconcile step fails this many times in a row is FAILED with the reason.
    quarantine_after: int = Field(default=5, ge=1)
    # Per-job back-off after a failed step or launch: base * 2^n, capped.
    backoff_base: Duration = timedelta(seconds=10)
    backoff_max: Duration = timedelta(minutes=10)
    # Every cloud call has a deadline (real seconds): one slow cloud stalls nothing else.
    call_timeout: Duration = timedelta(seconds=60)
    # Retention of history (clock time); finished jobs and their attempts are kept.
    event_retention: Duration = timedelta(days=90)
    price_retention: Duration = timedelta(days=30)
    instance_retention: Duration = timedelta(days=7)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)

    # Where jobs without their own `checkpoint` URI keep checkpoints: <root>/<job id>.
    checkpoint_root: str | None = None

    def resolved_state_dir(self) -> Path:
        return (self.state_dir or default_state_dir()).expanduser()

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.resolved_state_dir() / 'spotwise.db'}"

    def resolved_checkpoint_root(self) -> str:
        return self.checkpoint_root or (self.resolved_state_dir() / "checkpoints").as_uri()


class _NotYetSettings(StrictModel):
    """Adapters not shipped in this version: the section may exist but must stay disabled."""

    enabled: bool = False
    endpoint: str | None = None
    metadata_endpoint: str | None = None

    @field_validator("enabled")
    @classmethod
    def _off(cls, v: bool) -> bool:
        if v:
            raise ValueError("this cloud adapter is not available in this version yet")
        return v


class ProvidersSettings(StrictModel):
    local: LocalSettings | None = None
    aws: AwsSettings | None = None
    gcp: GcpSettings | None = None
    azure: _NotYetSettings | None = None


class BudgetSettings(StrictModel):
    name: str = Field(min_length=1)
    scope: str = "global"
    limit_usd: float = Field(gt=0)
    window: Window = Window.MONTH
    hard: bool = True

    @field_validator("scope")
    @classmethod
    def _scope(cls, v: str) -> str:
        if v != "global" and not re.match(r"^(team|job):[\w.-]+$", v):
            raise ValueError("scope must be 'global', 'team:NAME' or 'job:NAME'")
        return v

    def rule(self) -> BudgetRule:
        return BudgetRule(self.name, self.scope, self.limit_usd, self.window, self.hard)


class PolicySettings(StrictModel):
    # Policy for jobs with a deadline (see scheduler/policy); jobs without one use placement only.
    deadline_policy: str = "spotwise"
    restart_overhead: Duration = timedelta(minutes=3)
    spot_interruption_prior: float = Field(default=0.1, ge=0)

    @field_validator("deadline_policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        from scheduler.policy import POLICY_NAMES

        if v not in POLICY_NAMES or v == "optimal":
            names = ", ".join(n for n in POLICY_NAMES if n != "optimal")
            raise ValueError(f"unknown deadline policy {v!r}; choose one of: {names}")
        return v


class Config(StrictModel):
    daemon: DaemonSettings = DaemonSettings()
    providers: ProvidersSettings = ProvidersSettings()
    budgets: list[BudgetSettings] = Field(default_factory=list)
    policy: PolicySettings = PolicySettings()

    @model_validator(mode="after")
    def _checks(self) -> Config:
        names = [b.name for b in self.budgets]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"budget names must be unique: {', '.join(sorted(dupes))}")
        return self

    def with_default_provider(self) -> Config:
        """No provider configured at all means the embedded local market."""
        p = self.providers
        if any(getattr(p, n) is not None for n in ("local", "aws", "gcp")):
            return self
        return self.model_copy(
            update={"providers": p.model_copy(update={"local": LocalSettings()})}
        )

    def budget_rules(self) -> list[BudgetRule]:
        return [b.rule() for b in self.budgets]


def find_config(explicit: str | Path | None = None) -> Path | None:
    """--config, else $SPOTWISE_CONFIG, else ./spotwise.toml, else /etc/spotwise/spotwise.toml."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("SPOTWISE_CONFIG")
    if env:
        return Path(env)
    for p in DEFAULT_PATHS:
        if Path(p).is_file():
            return Path(p)
    return None


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate; with no file anywhere, the built-in defaults (local market)."""
    found = find_config(path)
    if found is None:
        return Config().with_default_provider()
    try:
        text = found.read_text()
    except FileNotFoundError:
        raise UserError(f"{found}: no such config file") from None
    except OSError as e:
        raise UserError(f"{found}: cannot read: {e.strerror}") from None
    return parse_config(text, source=str(found))


def parse_config(text: str, source: str = "<config>") -> Config:
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{source}: not valid TOML: {e}") from None
    try:
        return Config.model_validate(data).with_default_provider()
    except ValidationError as e:
        raise UserError(format_validation_error(e, source, key_lines(text))) from None


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")


def key_lines(text: str) -> dict[str, int]:
    """Map dotted keys ('daemon.reconcile_interval', 'budgets.0.limit_usd') to their line."""
    lines: dict[str, int] = {}
    prefix = ""
    arrays: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        h = _HEADER.match(line)
        if h:
            name = h.group(2).strip()
            if h.group(1) == "[[":
                arrays[name] = arrays.get(name, -1) + 1
                prefix = f"{name}.{arrays[name]}"
            else:
                prefix = name
            lines.setdefault(prefix, n)
            continue
        k = _KEY.match(line)
        if k:
            key = k.group(1).strip("\"'")
            lines[f"{prefix}.{key}" if prefix else key] = n
    return lines
