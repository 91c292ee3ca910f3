"""The one credential masker: every message a person may read passes through it.

Provider errors and events, the daemon's log lines and database URLs in messages are all
masked here, with one set of rules, so a credential shape known to one path is known to all.
The rules every cloud needs (URL passwords, bearer tokens, secret-looking `key=value` pairs)
are defined below; each cloud registers the shapes of its own credentials from
`providers/<cloud>/masks.py` (stdlib only, so the daemon's log masking never loads an SDK).
The clouds spotwise ships are registered on first use, whichever of them is configured.

Stdlib only and pure apart from that registry: masking is `re.sub` over the text, with known
secret values (a session's current token) replaced first.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

MASK = "***"
# Provider error and event messages are cut to this many characters (after masking, so a
# cut never leaves the start of a credential unmasked).
MESSAGE_LIMIT = 400
# Known secret values shorter than this are not replaced: they would mask ordinary words.
_MIN_SECRET = 4
# The cloud packages whose masks.py registers their credential shapes.
SHIPPED_CLOUDS = ("aws", "gcp", "azure")


@dataclass(frozen=True, slots=True)
class Rule:
    """One credential shape: `pattern` matches it and `replacement` (a re.sub template)
    keeps the harmless prefix. `example` is a text carrying one such credential, `secret`
    the part of it that must never survive masking: the tests feed every example through
    every masking path."""

    name: str
    pattern: re.Pattern[str]
    replacement: str
    example: str
    secret: str


def rule(name: str, pattern: str, replacement: str, example: str, secret: str) -> Rule:
    return Rule(name, re.compile(pattern), replacement, example, secret)


def key_value(name: str, keys: str, example: str, secret: str) -> Rule:
    """`key=value`, `key: value` or `"key": "value"` for the keys matched by `keys` (a regex
    alternation, case-insensitive): the value is masked, the key kept."""
    return rule(
        name, rf"(?i)\b({keys})(\"?\s*[=:]\s*\"?)([^\s\"&,;]+)", r"\1\2" + MASK, example, secret
    )


# URL userinfo: 'postgresql://user:secret@host/db' -> 'postgresql://user:***@host/db'. The
# password may hold '/' (database drivers accept it unescaped), not whitespace, quotes or '@'.
URL_PASSWORD = rule(
    "url-password",
    r"([A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@'\"]{0,200}:)[^\s@'\"]{1,500}@",
    r"\1" + MASK + "@",
    "connect postgresql://spot:hunter2/x@db.example/spotwise failed",
    "hunter2/x",
)

_GENERIC = (
    URL_PASSWORD,
    rule(
        "authorization-header",
        r"(?i)\b(authorization:\s*(?:bearer|basic)\s+)\S+",
        r"\1" + MASK,
        "Authorization: Basic c3BvdDpodW50ZXIy",
        "c3BvdDpodW50ZXIy",
    ),
    rule(
        "bearer-token",
        r"(?i)(Bearer\s+)[A-Za-z0-9._~+/=-]+",
        r"\1" + MASK,
        "sent Bearer abc.def-ghi~1 to the API",
        "abc.def-ghi~1",
    ),
    rule(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
        MASK,
        "token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl in the reply",
        "eyJzdWIiOiIxMjMifQ",
    ),
    key_value(
        "secret-key-value",
        r"password|passwd|token|api[_-]?key|signature",
        "retry with password=hunter2, api_key: k-123456",
        "hunter2",
    ),
)

_lock = threading.Lock()
_registered: dict[str, tuple[Rule, ...]] = {"generic": _GENERIC}
_shipped_loaded = False


def register(owner: str, rules: Iterable[Rule]) -> None:
    """Add (or replace) the credential shapes of `owner`, a cloud's name."""
    with _lock:
        _registered[owner] = tuple(rules)


def rules() -> tuple[Rule, ...]:
    """Every registered rule, the shipped clouds' included, in registration order."""
    global _shipped_loaded
    if not _shipped_loaded:
        for cloud in SHIPPED_CLOUDS:  # each masks.py calls register() when imported
            importlib.import_module(f"providers.{cloud}.masks")
        _shipped_loaded = True
    with _lock:
        return tuple(r for group in _registered.values() for r in group)


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret value and every registered credential shape masked."""
    for s in secrets:
        if s and len(s) >= _MIN_SECRET:
            text = text.replace(s, MASK)
    for r in rules():
        text = r.pattern.sub(r.replacement, text)
    return text


def mask_message(text: str, secrets: Iterable[str] = (), limit: int = MESSAGE_LIMIT) -> str:
    """mask(), cut to `limit` characters: a provider's error or event message."""
    text = mask(text, secrets)
    return text if len(text) <= limit else text[:limit] + "..."


def mask_url_passwords(text: str) -> str:
    """Only URL passwords masked, for text whose other words must stay as written: a URL the
    user configured, a config file's echo, a validation error naming a `password` key."""
    return URL_PASSWORD.pattern.sub(URL_PASSWORD.replacement, text)
