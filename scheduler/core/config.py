"""The daemon's TOML configuration, read with tomllib into typed, validated models.

A bad file gets one message naming the file, the key and (where known) the line; nothing here
prints a traceback for a user's mistake.
"""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from providers.aws.settings import AwsSettings
from providers.azure.settings import AzureSettings
from providers.gcp.settings import GcpSettings
from providers.local.settings import LocalSettings
from providers.settings import Duration, PositiveDuration, StrictModel, parse_duration
from scheduler.core.budget import BudgetRule, Window
from scheduler.core.errors import (
    UserError,
    clean,
    format_validation_error,
    key_lines,
    mask_urls,
    parse_toml,
    unusable_values,
)
from scheduler.core.gang_recovery import Recovery
from scheduler.core.jobspec import DEFAULT_TEAM, JobSpec, normalise_team
from scheduler.core.state_dir import default_database_url, default_state_dir
from trainer.contract import parse_uri

__all__ = ["Config", "key_lines", "mask_database_url", "parse_config"]

# The daemon's polling intervals (clock time): at least 100 ms (0 would spin), at most a day
# (a longer one is a daemon that never looks; at the local market's largest speedup a day of
# market time is still under 9 real seconds).
INTERVAL_MIN = timedelta(milliseconds=100)
INTERVAL_MAX = timedelta(days=1)
# The database URLs the engine can open: SQLite (the default) and PostgreSQL.
DATABASE_BACKENDS = ("sqlite", "postgresql", "postgres")
_DATABASE_URL = re.compile(r"^(?P<backend>[A-Za-z][A-Za-z0-9]*)(\+[A-Za-z0-9_]+)?://")


def _interval(v: timedelta) -> timedelta:
    if not INTERVAL_MIN <= v <= INTERVAL_MAX:
        raise ValueError(
            f"must be at least {INTERVAL_MIN.total_seconds():g}s and at most 1d, "
            f"got {v.total_seconds():g}s"
        )
    return v


Interval = Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(_interval)]


def absolute_path(v: Path | None, key: str) -> Path | None:
    """A path the daemon and every command resolve alike: absolute, or from `~`."""
    if v is None:
        return v
    expanded = v.expanduser()
    if not expanded.is_absolute():
        raise ValueError(
            f"{str(v)!r} is relative: the daemon and each command would resolve it against "
            f"the folder they were started in; use an absolute path (such as "
            f"{str(Path('/var/lib') / v)!r}) or one starting with ~"
        )
    return v


MIN_SPEND_RETENTION = timedelta(days=35)


class DaemonSettings(StrictModel):
    # The database, checkpoints and local instances hang off one directory, found the same
    # way by the daemon and the CLI: this key, else $STATE_DIRECTORY, else the XDG one.
    state_dir: Path | None = None
    database_url: str | None = None  # default: sqlite:///<state_dir>/spotwise.db
    owner: str = Field(default="spotwise", pattern=r"^[A-Za-z0-9_.-]+$")
    # Polling intervals (clock time): at least 100 ms, a 0 would spin.
    reconcile_interval: Interval = timedelta(seconds=5)
    price_interval: Interval = timedelta(minutes=5)
    accrue_interval: Interval = timedelta(seconds=30)
    # How long a pool stays out of placement after a capacity error (0: not at all).
    unavailable_ttl: Duration = timedelta(minutes=15)
    # How long a job avoids the pool that just interrupted it (0: not at all).
    avoid_after_interrupt: Duration = timedelta(minutes=30)
    # Tagged instances with no live attempt are terminated after this long (> 0: a launch
    # in flight would otherwise be killed as a leak).
    leak_grace: PositiveDuration = timedelta(minutes=5)
    # An attempt that never reports an instance within this time is failed and retried.
    launch_timeout: PositiveDuration = timedelta(minutes=10)
    # Time a job needs to checkpoint and stop; budgets keep this much headroom.
    stop_grace: Duration = timedelta(minutes=2)
    # A job placed again on a notice while its old instance still saves (`place_on_notice`):
    # the new attempt's store claim waits for the old attempt to end, at most the cloud's
    # notice window plus this long.
    handover_grace: Duration = timedelta(seconds=30)
    # Attempts that may be lost or rejected before the job fails; preemptions draw on their
    # own budget (None: unlimited), as Ray Train's max_failures / max_preemption_failures.
    max_attempts: int = Field(default=3, ge=1, le=1_000_000)
    max_preemptions: int | None = Field(default=None, ge=0, le=1_000_000)
    # A job whose reconcile step fails this many times in a row is FAILED with the reason.
    quarantine_after: int = Field(default=5, ge=1, le=1_000_000)
    # Per-job back-off after a failed step or launch: base * 2^n, capped.
    backoff_base: PositiveDuration = timedelta(seconds=10)
    backoff_max: PositiveDuration = timedelta(minutes=10)
    # Every cloud call has a deadline (real seconds): one slow cloud stalls nothing else.
    call_timeout: PositiveDuration = timedelta(seconds=60)
    # Retention of history (clock time); finished jobs and their attempts are kept.
    event_retention: Duration = timedelta(days=90)
    price_retention: Duration = timedelta(days=30)
    instance_retention: Duration = timedelta(days=7)
    # Hourly spend buckets (what `cost` and `report` break down) older than this are
    # pruned; budgets keep running totals and jobs and attempts keep their costs, so no
    # budget changes. At least 35 days: a month's window is rebuilt from its buckets.
    spend_retention: Duration = timedelta(days=400)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Two replicas on one PostgreSQL database (real seconds, judged by the database's clock):
    # the holder renews every lease_renew; if it has not renewed for lease_deadline it stops
    # mutating and exits; a standby takes the lease once it is lease_ttl old. Every lease
    # statement has lease_statement_timeout. Required: statement < renew < deadline < ttl.
    lease_ttl: PositiveDuration = timedelta(seconds=30)
    lease_renew: PositiveDuration = timedelta(seconds=10)
    lease_deadline: PositiveDuration = timedelta(seconds=20)
    lease_statement_timeout: PositiveDuration = timedelta(seconds=5)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)

    # Where jobs without their own `checkpoint` URI keep checkpoints: <root>/<job id>.
    checkpoint_root: str | None = None
    # The teams jobs may name (lowercase); empty: any team. Jobs naming no team are "default".
    teams: list[str] = Field(default_factory=list)

    @field_validator("state_dir")
    @classmethod
    def _state_dir(cls, v: Path | None) -> Path | None:
        return absolute_path(v, "state_dir")

    @field_validator("checkpoint_root")
    @classmethod
    def _checkpoint_root(cls, v: str | None) -> str | None:
        if v is not None:
            parse_uri(v, absolute=True)  # ValueError: one line with the accepted forms
        return v

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = _DATABASE_URL.match(v.strip())
        if m is None or m.group("backend").lower() not in DATABASE_BACKENDS:
            raise ValueError(
                f"{mask_urls(v)!r} is not a database URL spotwise can open; use "
                "sqlite:////absolute/path.db or postgresql://user@host/dbname"
            )
        return v

    def lease_order_problem(self) -> tuple[str, str, str] | None:
        """(shorter key, longer key, message) when the lease timings are out of order."""
        order = (
            ("lease_statement_timeout", self.lease_statement_timeout),
            ("lease_renew", self.lease_renew),
            ("lease_deadline", self.lease_deadline),
            ("lease_ttl", self.lease_ttl),
        )
        for (a, x), (b, y) in itertools.pairwise(order):
            if not x < y:
                return (
                    a,
                    b,
                    (
                        f"daemon.{a} ({x.total_seconds():g}s) must be shorter than daemon.{b} "
                        f"({y.total_seconds():g}s): the lease needs lease_statement_timeout < "
                        "lease_renew < lease_deadline < lease_ttl"
                    ),
                )
        return None

    @field_validator("spend_retention")
    @classmethod
    def _spend_retention(cls, v: timedelta) -> timedelta:
        if v < MIN_SPEND_RETENTION:
            raise ValueError(
                "must be at least 35d: a budget's month is rebuilt from its hourly buckets"
            )
        return v

    @field_validator("teams")
    @classmethod
    def _teams(cls, v: list[str]) -> list[str]:
        out = [normalise_team(t) for t in v]
        dupes = sorted({t for t in out if out.count(t) > 1})
        if dupes:
            raise ValueError(f"team names must be unique (case is ignored): {', '.join(dupes)}")
        return out

    def resolved_state_dir(self) -> Path:
        return (self.state_dir or default_state_dir()).expanduser()

    def resolved_database_url(self) -> str:
        return self.database_url or default_database_url(self.resolved_state_dir())

    def masked_database_url(self) -> str:
        """The database URL with any password replaced by ***, for printing."""
        return mask_database_url(self.resolved_database_url())

    def resolved_checkpoint_root(self) -> str:
        return self.checkpoint_root or (self.resolved_state_dir() / "checkpoints").as_uri()


class ProvidersSettings(StrictModel):
    local: LocalSettings | None = None
    aws: AwsSettings | None = None
    gcp: GcpSettings | None = None
    azure: AzureSettings | None = None


class BudgetSettings(StrictModel):
    name: str = Field(min_length=1)
    scope: str = "global"
    limit_usd: float = Field(gt=0)
    window: Window = Window.MONTH
    hard: bool = True

    @field_validator("scope")
    @classmethod
    def _scope(cls, v: str) -> str:
        v = v.strip()
        if v != "global" and not re.fullmatch(r"(team|job|user):[\w.@-]{1,63}", v):
            raise ValueError("scope must be 'global', 'team:NAME', 'job:NAME' or 'user:NAME'")
        if v.startswith("team:"):  # teams are case-insensitive: 'Research' is 'research'
            v = "team:" + normalise_team(v[5:])
        return v

    def rule(self) -> BudgetRule:
        return BudgetRule(self.name, self.scope, self.limit_usd, self.window, self.hard)


class PolicySettings(StrictModel):
    # Policy for jobs with a deadline (see scheduler/core/policy); jobs without one use
    # placement only.
    deadline_policy: str = "spotwise"
    restart_overhead: Duration = timedelta(minutes=3)
    spot_interruption_prior: float = Field(default=0.1, ge=0)
    # Follow prices (scheduler.core.price_moves): a move to a cheaper pool must save this share
    # of the cost of staying, net of the move, and the attempt must have run this long first.
    follow_min_saving: float = Field(default=0.2, ge=0)
    follow_min_gap: Duration = timedelta(minutes=30)
    # Early signals (scheduler.core.early_signals): the chance that a rebalance
    # recommendation is followed by an interruption, and how long before the notice it
    # comes; a job moves early only when that costs no more than waiting in expectation.
    early_signal_probability: float = Field(default=0.5, ge=0, le=1)
    early_signal_lead: Duration = timedelta(minutes=10)

    @field_validator("deadline_policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        from scheduler.core.policy import POLICY_NAMES

        if v not in POLICY_NAMES or v == "optimal":
            names = ", ".join(n for n in POLICY_NAMES if n != "optimal")
            raise ValueError(f"unknown deadline policy {v!r}; choose one of: {names}")
        return v


class GangSettings(StrictModel):
    # How a running gang that lost nodes resumes (scheduler/core/gang_recovery.py): "auto"
    # decides per loss by expected cost and time; "replace" replaces the lost nodes wherever
    # a pool can take them; "whole" always stops the others and re-places the gang.
    recovery: Recovery = Recovery.AUTO
    # The longest the other nodes wait (billed) for a replacement to run; past it the gang
    # is re-placed whole. A node's expected boot is [policy] restart_overhead.
    replace_wait: PositiveDuration = timedelta(minutes=10)


class ServerSettings(StrictModel):
    """`spotwise server`: where it listens, its TLS, whom it believes about client addresses."""

    # host:port; loopback by default (put TLS or a reverse proxy in front of anything else).
    listen: str = Field(
        default="127.0.0.1:8765", pattern=r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):\d{1,5}$"
    )
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # Proxies whose X-Forwarded-For is believed (their own address otherwise counts).
    trusted_proxies: list[str] = Field(default_factory=list)
    # Failed authentications per client address per minute before it gets 429.
    login_failures: int = Field(default=10, ge=1, le=100_000)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: set both or neither")
        return self


class AlertSettings(StrictModel):
    """Budget alerts: events, warnings in the log, metrics and, when set, a webhook."""

    # Percent of a budget's limit; each is raised once per window.
    thresholds: list[float] = Field(default_factory=lambda: [50.0, 80.0, 100.0])
    # Say when a budget's window will reach its limit at the current burn, once per window.
    forecast: bool = True
    # A Slack-compatible incoming webhook (JSON with "text"); none: events and logs only.
    webhook_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    webhook_timeout: PositiveDuration = timedelta(seconds=10)
    # Tries per alert before it is given up (with back-off between them).
    webhook_retries: int = Field(default=8, ge=1, le=1000)

    @field_validator("thresholds")
    @classmethod
    def _percents(cls, v: list[float]) -> list[float]:
        if any(not 0 < x <= 1000 for x in v):
            raise ValueError(
                "thresholds are percents of a budget's limit, above 0 and at most 1000"
            )
        return sorted(set(v))


class Config(StrictModel):
    daemon: DaemonSettings = DaemonSettings()
    providers: ProvidersSettings = ProvidersSettings()
    budgets: list[BudgetSettings] = Field(default_factory=list)
    policy: PolicySettings = PolicySettings()
    gangs: GangSettings = GangSettings()
    server: ServerSettings = ServerSettings()
    alerts: AlertSettings = AlertSettings()

    @model_validator(mode="after")
    def _checks(self) -> Config:
        names = [b.name for b in self.budgets]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"budget names must be unique: {', '.join(sorted(dupes))}")
        d = self.daemon
        if any(b.hard for b in self.budgets) and d.accrue_interval + d.stop_grace <= timedelta(0):
            raise ValueError(
                "daemon.accrue_interval + daemon.stop_grace must be > 0 with a hard budget "
                "(it is the headroom a job needs to stop before the limit)"
            )
        return self

    def with_default_provider(self) -> Config:
        """No provider configured at all means the embedded local market."""
        p = self.providers
        if any(getattr(p, n) is not None for n in ("local", "aws", "gcp", "azure")):
            return self
        return self.model_copy(
            update={"providers": p.model_copy(update={"local": LocalSettings()})}
        )

    def budget_rules(self) -> list[BudgetRule]:
        return [b.rule() for b in self.budgets]


def parse_config(text: str, source: str = "<config>") -> Config:
    return config_from_toml(parse_toml(text, source), text, source)


def config_from_toml(data: dict[str, Any], text: str, source: str) -> Config:
    """A Config from parsed TOML (`data`) and its `text` (for line numbers in messages)."""
    lines = key_lines(text)
    problems = unusable_values(data, lines, source)
    if problems:
        raise UserError("\n".join(problems))
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        raise UserError(
            mask_urls(format_validation_error(e, source, lines, model=Config, data=data))
        ) from None
    except RecursionError:
        raise UserError(f"{clean(source, 200)}: values are nested too deeply") from None
    if "providers" not in data:  # no [providers] at all: the embedded local market
        config = config.with_default_provider()
    problems = _cross_checks(config, lines, clean(source, 200))
    if problems:
        raise UserError("\n".join(problems))
    return config


def _cross_checks(config: Config, lines: dict[str, int], source: str) -> list[str]:
    """Checks across sections, reported at the key that is wrong."""
    out = []
    lease = config.daemon.lease_order_problem()
    if lease is not None:
        short, long, why = lease
        key = f"daemon.{short}" if f"daemon.{short}" in lines else f"daemon.{long}"
        where = f"{key} (line {lines[key]})" if key in lines else key
        out.append(f"{source}: {where}: {why}")
    p = config.providers
    clouds = [n for n in ("aws", "gcp", "azure") if getattr(getattr(p, n), "enabled", False)]
    if p.local is not None and clouds and not p.local.beside_clouds:
        line = lines.get("providers.local")
        where = f"providers.local (line {line})" if line else "providers.local"
        out.append(
            f"{source}: {where}: the local market is a simulator, refused beside "
            f"{', '.join(clouds)}: remove [providers.local], or set beside_clouds = true "
            "there to place on both (tests, demos)"
        )
    teams = config.daemon.teams
    for i, b in enumerate(config.budgets):
        team = b.scope[5:] if b.scope.startswith("team:") else None
        if teams and team is not None and team not in teams:
            key = f"budgets.{i}.scope"
            shown = f"budgets[{i}] {b.name!r}.scope"
            where = f"{shown} (line {lines[key]})" if key in lines else shown
            out.append(
                f"{source}: {where}: team {team!r} is not in daemon.teams"
                f"{_did_you_mean(team, teams)}; teams: {', '.join(teams)}"
            )
    return out


def mask_database_url(url: str) -> str:
    """'postgresql://user:secret@host/db' -> 'postgresql://user:***@host/db'."""
    return mask_urls(url)


def _did_you_mean(word: str, options: list[str]) -> str:
    import difflib

    hits = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {hits[0]!r}?)" if hits else ""


def check_team(spec: JobSpec, config: Config, source: str = "<job>") -> None:
    """When the config declares `[daemon] teams`, a job must name one of them (UserError).

    A job that names no team is in team 'default', which is always accepted (only global
    budgets apply to it). Names are compared normalised ('Research' is 'research').
    """
    teams = list(config.daemon.teams)
    if not teams or spec.team == DEFAULT_TEAM or spec.team in teams:
        return
    raise UserError(
        f"{clean(source, 200)}: team: unknown team {spec.team!r}"
        f"{_did_you_mean(spec.team, teams)}; the config's teams: {', '.join(teams)}"
    )


def local_settings(config: Config) -> LocalSettings:
    """The local market's settings, its state under the daemon's state_dir by default."""
    local = config.providers.local
    assert local is not None
    if local.state_dir is not None:
        return local
    return local.model_copy(update={"state_dir": config.daemon.resolved_state_dir() / "local"})
