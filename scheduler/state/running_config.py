"""The configuration a daemon runs with, recorded beside its heartbeat for the CLI to show.

A person's `spotwise budget` reads its own config file (./spotwise.toml, $SPOTWISE_CONFIG,
...) while the daemon enforces the one it was started with; the two drift apart without a
word. So the daemon records what it runs with (the whole validated config, with its path,
state directories resolved and any database password masked) at start and at every reload,
and the commands that show budgets, teams, providers or market time read that. Credentials
never live in the config (each cloud's standard chain supplies them), so the record holds
none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from scheduler.core.config import Config, local_settings, mask_database_url
from scheduler.core.read_settings import ReadSettings
from scheduler.state import installed

# Bumped when the record's shape changes; a CLI that finds another version uses its own file.
RECORD_VERSION = 1
PROVIDERS = ("local", "aws", "gcp", "azure")


@dataclass(frozen=True, slots=True)
class RunningConfig:
    """What a daemon recorded: the file it read (None: built-in defaults) and the config."""

    path: str | None
    config: Config


def record(config: Config, path: Path | str | None, source_sha256: str | None = None) -> str:
    """The record a daemon writes (JSON): its config as it resolved it; with the digest of
    the text it validated (`files.source_digest`), also what vouches for that text to a read
    command of the same spotwise (state.vouched_config): the digest, the version and the
    values those commands need."""
    resolved = resolve(config)
    doc = resolved.model_dump(mode="json")
    doc["daemon"]["database_url"] = mask_database_url(resolved.daemon.resolved_database_url())
    out: dict[str, Any] = {
        "version": RECORD_VERSION,
        "path": str(Path(path).resolve()) if path else None,
        "config": doc,
    }
    if source_sha256 is not None:
        out["source_sha256"] = source_sha256
        out["spotwise"] = installed.version()
        out["read"] = ReadSettings.of_config(resolved).to_json()
    return json.dumps(out, sort_keys=True)


def resolve(config: Config) -> Config:
    """`config` with the state directories it would find spelled out: a CLI run by another
    user, or without the service's $STATE_DIRECTORY, finds what the daemon found."""
    daemon = config.daemon.model_copy(update={"state_dir": config.daemon.resolved_state_dir()})
    providers = config.providers
    if providers.local is not None:
        providers = providers.model_copy(update={"local": local_settings(config)})
    return config.model_copy(update={"daemon": daemon, "providers": providers})


def parse(text: str | None) -> RunningConfig | None:
    """The record back, or None when there is none or this spotwise cannot read it (an
    older or newer daemon): the caller then uses its own config, as before."""
    if not text:
        return None
    try:
        doc = json.loads(text)
        if doc.get("version") != RECORD_VERSION:
            return None
        config = Config.model_validate(doc["config"])
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
        return None
    return RunningConfig(doc.get("path"), config)


def comparable(config: Config) -> dict[str, Any]:
    """The parts a person compares between two configs: budgets, teams, providers (and the
    local market's speed-up, which is the clock every time on screen runs on)."""
    p = config.providers
    return {
        "budgets": [b.model_dump(mode="json") for b in config.budgets],
        "teams": list(config.daemon.teams),
        "providers": [n for n in PROVIDERS if getattr(p, n) is not None],
        "speedup": p.local.speedup if p.local is not None else None,
    }


def differences(daemon: Config, own: Config) -> list[str]:
    """Which of budgets, teams, providers and speedup differ (in that order)."""
    a, b = comparable(daemon), comparable(own)
    return [k for k in a if a[k] != b[k]]


def summary(config: Config) -> dict[str, Any]:
    """What the daemon's start-up banner names, one value per key."""
    p = config.providers
    names = [n for n in PROVIDERS if getattr(p, n) is not None]
    shown = [
        f"local (speedup {p.local.speedup:g}x)" if n == "local" and p.local else n for n in names
    ]
    budgets = [
        f"{b.name} ({b.scope}, ${b.limit_usd:g}/{b.window.value}, {'hard' if b.hard else 'soft'})"
        for b in config.budgets
    ]
    port = config.daemon.metrics_port
    return {
        "state_dir": str(config.daemon.resolved_state_dir()),
        "database": config.daemon.masked_database_url(),
        "providers": ", ".join(shown) or "none",
        "budgets": ", ".join(budgets) or "none",
        "teams": ", ".join(config.daemon.teams) or "any",
        "metrics": f"http://127.0.0.1:{port}/metrics" if port is not None else "off",
    }


def changes(old: Config, new: Config) -> list[str]:
    """What a reload changed, one 'section.key: old -> new' per setting (lists of budgets
    by name), for the daemon's log."""
    out: list[str] = []
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    for section in ("daemon", "providers", "policy"):
        _diff(a[section], b[section], section, out)
    old_budgets = {x["name"]: x for x in a["budgets"]}
    new_budgets = {x["name"]: x for x in b["budgets"]}
    for name in sorted(old_budgets.keys() - new_budgets.keys()):
        out.append(f"budgets: removed {name!r}")
    for name in sorted(new_budgets.keys() - old_budgets.keys()):
        out.append(f"budgets: added {name!r}")
    for name in sorted(old_budgets.keys() & new_budgets.keys()):
        _diff(old_budgets[name], new_budgets[name], f"budgets[{name!r}]", out)
    return out


def _diff(old: Any, new: Any, where: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            _diff(old.get(key), new.get(key), f"{where}.{key}", out)
        return
    if old != new:
        out.append(mask_database_url(f"{where}: {_shown(old)} -> {_shown(new)}"))


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, dict):
        return "(set)"
    return json.dumps(value)
