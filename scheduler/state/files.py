"""The operator's files, read from disk into the core's values: the config (found where the
daemon and every command look for it) and job files. The core parses text; this is where the
text comes from, so every way a file can be unreadable is one UserError naming it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.core.errors import UserError, clean, key_lines, parse_toml
from scheduler.state.paths import creatable
from scheduler.state.read_connection import sqlite_file

if TYPE_CHECKING:  # the models are imported where a file is validated: a read command
    # the daemon vouches for (state.vouched_config) finds its file here and needs neither
    from scheduler.core.config import Config
    from scheduler.core.jobspec import JobSpec

DEFAULT_PATHS = ("./spotwise.toml", "/etc/spotwise/spotwise.toml")

MAX_FILE_BYTES = 10 * 1024 * 1024


def read_text_file(path: Path, what: str) -> str:
    """The text of a config or job file; every way it can be unreadable is one UserError."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):  # a FIFO or /dev/zero would never end
            raise UserError(f"{path}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise UserError(f"{path}: {st.st_size:,} bytes is too large for a {what}")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a {what}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}: not a text file (invalid UTF-8 at byte {e.start}); "
            "a config or job file is TOML text"
        ) from None


def read_toml_file(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """(data, text) of a TOML file; every way it can be unreadable is one UserError."""
    text = read_text_file(path, what)
    return parse_toml(text, str(path)), text


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


def source_digest(text: str) -> str:
    """The SHA-256 of a config file's text ("" for the built-in defaults): what the daemon
    records beside the config it validated, for a read command to recognise the file."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate; with no file anywhere, the built-in defaults (local market).

    Beyond the model's checks, what only the machine can answer is checked here, where the
    daemon, `check-config` and every command read the config alike: the database URL must
    parse for the engine, and each directory the config names must exist or be creatable.
    Nothing is created: read commands write nothing."""
    return load_config_source(path)[0]


def load_config_source(path: str | Path | None = None) -> tuple[Config, str]:
    """`load_config`, and the `source_digest` of the very text it validated."""
    from scheduler.core.config import Config, config_from_toml

    found = find_config(path)
    if found is None:
        config, lines, source = Config().with_default_provider(), {}, "built-in defaults"
        text = ""
    else:
        data, text = read_toml_file(found, "config file")
        config = config_from_toml(data, text, str(found))
        lines, source = key_lines(text), str(found)
    problems = unusable(config, lines, clean(source, 200))
    if problems:
        raise UserError("\n".join(problems))
    return config, source_digest(text)


def _where(key: str, lines: dict[str, int]) -> str:
    return f"{key} (line {lines[key]})" if key in lines else key


def unusable(config: Config, lines: dict[str, int], source: str) -> list[str]:
    """One line per setting the engine or the file system cannot honour."""
    out: list[str] = []
    d = config.daemon
    url = d.resolved_database_url()
    plain = sqlite_file(url)  # the common case needs no SQLAlchemy (a command's start-up)
    if d.database_url is None:
        why = None  # under state_dir, checked below
    elif plain is not None and plain.is_absolute():
        why = creatable(plain.parent)
        why = f"the database's folder: {why}" if why else None
    else:
        from scheduler.state.db import database_url_problem

        why = database_url_problem(url)
    if why is not None:
        out.append(f"{source}: {_where('daemon.database_url', lines)}: {why}")
    dirs = [("daemon.state_dir", d.resolved_state_dir())]
    local = config.providers.local
    if local is not None and local.state_dir is not None:
        dirs.append(("providers.local.state_dir", local.state_dir))
    for key, path in dirs:
        why = creatable(path)
        if why is not None:
            out.append(f"{source}: {_where(key, lines)}: {why}")
    return out


def load_jobspec(path: str | Path) -> JobSpec:
    """Read and validate a job file; every problem becomes one UserError naming file and key."""
    from scheduler.core.jobspec import jobspec_from_dict

    path = Path(path)
    data, text = read_toml_file(path, "job file")
    return jobspec_from_dict(data, source=str(path), lines=key_lines(text))
