"""The command line against an API server instead of the database: remote mode.

When `SPOTWISE_API` (the server's URL) and `SPOTWISE_TOKEN` are set, or `spotwise login`
stored them (a file only its owner may read), the read and desired-state commands ask the
server, which answers with the very documents the local reads build; the commands then print
them with the same code, so the output is the same either way. Without them, the commands
read the database directly, as on the daemon's host.

Only the standard library here (urllib, ssl): a remote `status` starts as fast as a local
one. The token is sent as a bearer header and never printed; a private CA for the server's
own certificate is `SPOTWISE_CA_CERT`.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

ENV_API = "SPOTWISE_API"
ENV_TOKEN = "SPOTWISE_TOKEN"
ENV_CA = "SPOTWISE_CA_CERT"
TIMEOUT = 30.0
# The keys whose values are times in every document the server sends (ISO-8601 UTC text),
# turned back into datetimes for the code that prints tables.
TIME_KEYS = frozenset(
    {
        "at", "created_at", "updated_at", "deadline", "deadline_at", "started_at",
        "ended_at", "notice_at", "since", "until", "renewed_at", "window_start",
        "projected_to", "forecast_at", "seen_at", "first_hour", "last_hour", "start", "end",
        "generated_at", "anchor",
    }
)  # fmt: skip


def login_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "spotwise" / "login.json"


def target() -> Remote | None:
    """The server to talk to, or None: the database directly."""
    from scheduler.core.errors import UserError

    url = os.environ.get(ENV_API, "").strip()
    token = os.environ.get(ENV_TOKEN, "").strip()
    if url and token:
        return Remote(url, token)
    path = login_file()
    if not path.exists():
        if url or token:
            missing = ENV_TOKEN if url else ENV_API
            raise UserError(f"{ENV_API} and {ENV_TOKEN} go together: {missing} is not set")
        return None
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UserError(
            f"{path} holds a token and others may read it: chmod 600 {path} "
            "(or spotwise login again)"
        )
    try:
        saved = json.loads(path.read_text())
        return Remote(url or str(saved["url"]), token or str(saved["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{path} is not a spotwise login: spotwise login again") from None


def save_login(url: str, token: str) -> Path:
    """Store the server and token for later commands, readable by this user only."""
    path = login_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token}, f)
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


def with_times(value: Any, key: str = "") -> Any:
    """A document from the server with its times as aware datetimes again."""
    if isinstance(value, dict):
        return {k: with_times(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [with_times(v, key) for v in value]
    if key in TIME_KEYS and isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return t if t.tzinfo else t.replace(tzinfo=UTC)
    return value


@dataclass
class Remote:
    """One API server, as the commands use it."""

    url: str
    token: str

    def __post_init__(self) -> None:
        from scheduler.core.errors import UserError

        self.url = self.url.rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise UserError(f"{ENV_API} {self.url!r}: use the server's URL, http(s)://HOST:PORT")

    # -- HTTP ---------------------------------------------------------------------------------
    def request(
        self, method: str, path: str, params: Any = None, body: Any = None
    ) -> tuple[str, dict[str, str]]:
        """(body text, headers) of one call; a refusal is a UserError with the server's
        line (exit 2 for the caller's mistake, 1 for the server's)."""
        import ssl
        import urllib.error
        import urllib.request

        from scheduler.core.errors import UserError

        query = f"?{urlencode(params, doseq=True)}" if params else ""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}/api/v1{path}{query}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json",
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        context = None
        if self.url.startswith("https://"):
            context = ssl.create_default_context(cafile=os.environ.get(ENV_CA) or None)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT, context=context) as resp:
                return resp.read().decode(), dict(resp.headers.items())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                message = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                message = f"the server answered {e.code} {e.reason}"
            error = UserError(str(message))
            if e.code >= 500 or e.code == 429:
                error.exit_code = 1
            raise error from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            error = UserError(f"cannot reach the spotwise server at {self.url}: {reason}")
            error.exit_code = 1
            raise error from None

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        return json.loads(self.request("GET", path, params)[0])  # type: ignore[no-any-return]

    def post(self, path: str, body: Any = None) -> dict[str, Any]:
        return json.loads(self.request("POST", path, None, body if body is not None else {})[0])  # type: ignore[no-any-return]

    @staticmethod
    def job_path(ref: str) -> str:
        return "/jobs/" + quote(ref, safe="")

    # -- what the commands read ---------------------------------------------------------------
    def status_document(
        self, states: list[str], team: str | None, user: str | None
    ) -> dict[str, Any]:
        """The `status -o json` document, every page of it."""
        params: list[tuple[str, str]] = [("state", s) for s in states]
        params += [("team", team)] if team else []
        params += [("user", user)] if user else []
        text, headers = self.request("GET", "/jobs", params)
        doc = json.loads(text)
        link = headers.get("Link") or headers.get("link") or ""
        while link.startswith("</api/v1/jobs?"):
            nxt = link[len("</api/v1") : link.index(">")]
            text, headers = self.request("GET", nxt)
            doc["jobs"] += json.loads(text)["jobs"]
            link = headers.get("Link") or headers.get("link") or ""
        return doc  # type: ignore[no-any-return]

    def heartbeat(self) -> tuple[dict[str, Any] | None, str | None]:
        """(the daemon's lease, the stale-daemon warning), as the local commands read them."""
        doc = with_times(self.get("/daemon"))
        return doc["daemon"], doc["daemon_warning"]

    def screen(self) -> Any:
        """The screen clock the local commands use, from the daemon's clock."""
        from scheduler.cli.common import ScreenClock

        clock = with_times(self.get("/whoami"))["clock"]

        class _Clock:
            speedup = clock["speedup"]
            anchor = clock["anchor"]

            def now(self) -> datetime:
                wall = datetime.now(UTC)
                if self.anchor is None or self.speedup == 1.0:
                    return wall
                return self.anchor + (wall - self.anchor) * self.speedup  # type: ignore[no-any-return]

        return ScreenClock(_Clock())

    def job_detail(self, ref: str) -> dict[str, Any]:
        return self.get(self.job_path(ref))

    def local_pools(self, job_ids: list[str]) -> dict[str, set[str]]:
        ids = sorted({i for i in job_ids if i})
        if not ids:
            return {}
        doc = self.get("/pools", [("job", i) for i in ids])
        return {k: set(v) for k, v in doc["pools"].items()}

    def events(self, **params: Any) -> list[dict[str, Any]]:
        query = [(k, v) for k, v in params.items() if v is not None and k != "kind"]
        query += [("kind", k) for k in params.get("kind") or []]
        return with_times(self.get("/events", query)["events"])  # type: ignore[no-any-return]

    def newest_event_id(self) -> int:
        rows = self.get("/events", {"limit": 1})["events"]
        return int(rows[-1]["id"]) if rows else 0
