"""Shell completion of job ids, job names and states, answered before Typer is imported.

`spotwise --install-completion` installs Typer's completion script; each TAB then runs
`spotwise` with `_SPOTWISE_COMPLETE` set. Through Typer that costs the whole command line's
start (Typer, its pydantic adapters, the command's module, the config's models): about a
third of a second on a loaded machine, each TAB. The TABs people press most (a job after
`show`, `logs`, `cancel`, `release`, `requeue` or `events --job`; a state after `status
--state`) are answered here instead, from the database read with sqlite3 alone and the
answer written in Typer's own format for bash, zsh and fish; anything else goes to Typer.
A test holds the two answers equal.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

COMPLETE_VAR = "_SPOTWISE_COMPLETE"
JOB_COMMANDS = {"show", "logs", "cancel", "release", "requeue"}
# The options of those commands (and events, status) that take a value: a word after one
# of these is its value, not the job.
VALUE_OPTIONS = {
    "-c", "--config", "-o", "--output", "-a", "--attempt", "--stream", "-t", "--team",
    "-j", "--job", "-k", "--kind", "--since", "-u", "--user", "--limit", "--interval",
    "-s", "--state",
}  # fmt: skip
STATES = (
    "pending",
    "launching",
    "running",
    "recovering",
    "succeeded",
    "failed",
    "cancelled",
    "held",
)


def answer() -> bool:
    """Print the completion for this TAB and return True, or return False to let Typer
    answer (a shell, a command or a position this does not cover)."""
    shell = os.environ.get(COMPLETE_VAR, "")
    words = _words(shell)
    if words is None:
        return False
    args, incomplete = words
    items = _items(args, incomplete)
    if items is None:
        return False
    out = _format(shell, items)
    if out is not None:
        sys.stdout.write(out + "\n")  # as click.echo writes Typer's answer
        sys.stdout.flush()
    return True


def _words(shell: str) -> tuple[list[str], str] | None:
    """(the words before the one being completed, that word), as Typer reads them."""
    try:
        if shell == "complete_bash":
            cwords = shlex.split(os.environ["COMP_WORDS"])
            cword = int(os.environ["COMP_CWORD"])
            return cwords[1:cword], cwords[cword] if cword < len(cwords) else ""
        if shell in ("complete_zsh", "complete_fish"):
            text = os.environ.get("_TYPER_COMPLETE_ARGS", "")
            args = shlex.split(text)[1:]
            if args and not text.endswith(" "):
                return args[:-1], args[-1]
            return args, ""
    except (KeyError, ValueError):
        return None
    return None


def _items(args: list[str], incomplete: str) -> list[tuple[str, str]] | None:
    """What to offer, or None when this is not a TAB answered here."""
    if not args or incomplete.startswith("-"):
        return None
    command, rest = args[0], args[1:]
    previous = rest[-1] if rest else ""
    if command == "status" and previous in ("-s", "--state"):
        return [(s, "") for s in STATES if s.startswith(incomplete.lower())]
    if command == "events" and previous in ("-j", "--job"):
        return jobs(_config(rest), incomplete)
    if command in JOB_COMMANDS and previous not in VALUE_OPTIONS and not _positional(rest):
        return jobs(_config(rest), incomplete)
    return None


def _positional(rest: list[str]) -> bool:
    """Whether a positional argument (the job) is already among `rest`."""
    skip = False
    for w in rest:
        if skip:
            skip = False
        elif w in VALUE_OPTIONS:
            skip = True
        elif not w.startswith("-"):
            return True
    return False


def _config(rest: list[str]) -> str | None:
    for i, w in enumerate(rest):
        if w in ("-c", "--config") and i + 1 < len(rest):
            return rest[i + 1]
        if w.startswith("--config="):
            return w.split("=", 1)[1]
    return None


def jobs(config: str | None, incomplete: str) -> list[tuple[str, str]]:
    return job_completions(Path(config) if config else None, incomplete)


# At most this many answers; the database is read with sqlite3 only, and a TAB that cannot
# be answered offers nothing rather than print a traceback into the shell.
LIMIT = 50
_FINISHED = {"SUCCEEDED", "FAILED", "CANCELLED"}
# Where a config is looked for without --config or $SPOTWISE_CONFIG (state.files.DEFAULT_PATHS,
# which is not imported here: a test holds the two equal).
CONFIG_PATHS = ("./spotwise.toml", "/etc/spotwise/spotwise.toml")


def job_completions(config: Path | str | None, incomplete: str) -> list[tuple[str, str]]:
    """Job ids and names starting with what was typed, active and newest first, each with
    its name (or id) and state as help."""
    try:
        url = completion_database_url(config)
        path = _sqlite_path(url) if url else None
        if path is None or not path.exists():
            return []  # PostgreSQL: no network round trip on a TAB
        import sqlite3

        like = incomplete.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True, timeout=2)
        try:
            conn.execute("PRAGMA query_only = ON")
            rows = conn.execute(
                "SELECT id, name, state FROM job WHERE id LIKE ? ESCAPE '\\' "
                "OR name LIKE ? ESCAPE '\\' ORDER BY created_at DESC LIMIT ?",
                (like, like, LIMIT * 2),
            ).fetchall()
        finally:
            conn.close()
    except Exception:
        return []
    active = [r for r in rows if r[2] not in _FINISHED] + [r for r in rows if r[2] in _FINISHED]
    out: dict[str, str] = {}
    for job_id, name, state in active:
        if job_id.startswith(incomplete):
            out.setdefault(job_id, f"{name} {state}")
        if name.startswith(incomplete):
            out.setdefault(name, f"{job_id} {state}")
    return list(out.items())[:LIMIT]


def _sqlite_path(url: str) -> Path | None:
    """read_connection.sqlite_file's rule: a plain sqlite:///PATH, else None."""
    prefix = "sqlite:///"
    rest = url[len(prefix) :] if url.startswith(prefix) else ""
    if not rest or rest == ":memory:" or any(c in rest for c in "?#%"):
        return None
    return Path(rest)


def completion_database_url(given: str | Path | None) -> str | None:
    """The database URL the config names, found as load_config finds the file and
    DaemonSettings.resolved_database_url resolves it, but read with tomllib alone: a TAB
    must not pay for validating the whole config (pydantic and every provider's
    settings). None when the file cannot be read (the completion offers nothing)."""
    import tomllib

    path = Path(given) if given else None
    if path is None and os.environ.get("SPOTWISE_CONFIG"):
        path = Path(os.environ["SPOTWISE_CONFIG"])
    if path is None:
        path = next((Path(p) for p in CONFIG_PATHS if Path(p).is_file()), None)
    daemon: dict[str, object] = {}
    if path is not None:
        try:
            daemon = tomllib.loads(path.read_text()).get("daemon") or {}
        except (OSError, ValueError):
            return None
    if isinstance(daemon.get("database_url"), str):
        return str(daemon["database_url"])
    state = daemon.get("state_dir")
    if not isinstance(state, str):
        systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        state = systemd or str(Path(base) / "spotwise")
    return f"sqlite:///{Path(state).expanduser() / 'spotwise.db'}"


def _format(shell: str, items: list[tuple[str, str]]) -> str | None:
    """Typer's formats (typer/_completion_classes.py): bash one value a line; zsh an
    _arguments spec, or _files when there is nothing; fish value<TAB>help, and for its
    'is-args' probe the exit status alone."""
    if shell == "complete_bash":
        return "\n".join(v for v, _ in items)
    if shell == "complete_zsh":
        if not items:
            return "_files"
        lines = [f'"{_zsh(v)}":"{_zsh(h)}"' if h else f'"{_zsh(v)}"' for v, h in items]
        return "_arguments '*: :((" + "\n".join(lines) + "))'"
    action = os.environ.get("_TYPER_COMPLETE_FISH_ACTION", "")
    if action == "is-args":
        sys.exit(0 if items else 1)
    if action == "get-args" and items:
        return "\n".join(f"{v}\t{' '.join(h.split())}" if h else v for v, h in items)
    return ""


def _zsh(s: str) -> str:
    return (
        s.replace('"', '""')
        .replace("'", "''")
        .replace("$", "\\$")
        .replace("`", "\\`")
        .replace(":", r"\\:")
    )
