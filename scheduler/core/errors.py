"""Errors a user can cause, rendered as one clear line instead of a traceback.

Also the shared pieces every user-facing file reader needs: reading a TOML file from bytes
(binary, bad UTF-8, nesting too deep and huge numbers become one UserError), mapping dotted keys
to line numbers, rejecting values no consumer can handle (inf/nan, NUL characters), and masking
passwords in URLs before anything is printed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

# Every command imports this module: what only a failure or a config parse needs (difflib,
# tomllib, the masker's patterns, pydantic) is imported where it is used, about 7 ms of
# each start.
if TYPE_CHECKING:
    from pydantic import ValidationError


class UserError(Exception):
    """Bad input from a user (config, job file, CLI argument). The CLI prints it and exits 2."""

    exit_code = 2


def mask_urls(text: str) -> str:
    """'postgresql://user:secret@host/db' -> 'postgresql://user:***@host/db', anywhere in text
    (the one masker's URL rule, providers/masking.py; a config echo keeps its other words)."""
    from providers.masking import mask_url_passwords

    return mask_url_passwords(text)


def clean(text: str, limit: int = 120) -> str:
    """User text made safe for one error line: control characters escaped, length capped."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return out if len(out) <= limit else out[: limit - 3] + "..."


def format_validation_error(
    err: ValidationError,
    source: str,
    lines: dict[str, int] | None = None,
    *,
    model: Any = None,
    data: Any = None,
) -> str:
    """One message per problem: '<file>: <dotted.key> (line N): <what is wrong>'.

    With the `model` that was validated, an unknown key gets the closest known key of its
    table ('did you mean'); with the parsed `data`, an element of a list of named tables is
    named by its name as well as its index (`budgets[1] 'vision'.limit_usd`)."""
    out = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        line = (lines or {}).get(key)
        shown = clean(display_key(e["loc"], data), 80) if e["loc"] else clean(key, 80)
        where = f"{shown} (line {line})" if line else shown
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            known = known_keys(model, e["loc"][:-1]) if model is not None else []
            import difflib

            hits = difflib.get_close_matches(str(e["loc"][-1]), known, n=1, cutoff=0.6)
            msg = (
                f"unknown key (did you mean {hits[0]!r}?)"
                if hits
                else ("unknown key (check the spelling)")
            )
        elif e["type"] == "missing":
            msg = "required key is missing"
        out.append(f"{clean(source, 200)}: {where}: {clean(msg, 400)}")
    return "\n".join(dict.fromkeys(out))  # a problem reported twice is shown once


def display_key(loc: tuple[Any, ...] | list[Any], data: Any = None) -> str:
    """A key as a person finds it in the file: 'daemon.reconcile_interval'; an element of
    a list of named tables by index and name, "budgets[1] 'vision'.limit_usd"."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            name = node[part].get("name") if _indexable(node, part) else None
            out += f"[{part}]" + (f" {name!r}" if isinstance(name, str) else "")
            node = node[part] if _indexable(node, part) else None
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def _indexable(node: Any, i: int) -> bool:
    return isinstance(node, list) and -len(node) <= i < len(node) and isinstance(node[i], dict)


def known_keys(model: Any, loc: tuple[Any, ...] | list[Any]) -> list[str]:
    """The keys the table at `loc` of `model` (a pydantic model class) accepts: the model's
    fields, walked through nested models and lists of them."""
    current = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _submodel(fields[part].annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None) or {}
    return list(fields)


def _submodel(annotation: Any) -> Any:
    """The pydantic model inside an annotation (Model, Model | None, list[Model]), or None."""
    import typing

    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and hasattr(a, "model_fields"):
            return a
        stack.extend(typing.get_args(a))
    return None


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """tomllib.loads, with every failure (including ones tomllib does not wrap) a UserError."""
    import tomllib

    if text.startswith("\ufeff"):  # a byte-order mark from some editors
        text = text[1:]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{clean(source, 200)}: not valid TOML: {clean(str(e), 200)}") from None
    except RecursionError:
        raise UserError(f"{clean(source, 200)}: not valid TOML: nested too deeply") from None
    except (ValueError, OverflowError, MemoryError) as e:  # e.g. an integer of 5,000 digits
        raise UserError(f"{clean(source, 200)}: not valid TOML: {clean(str(e), 200)}") from None
    return data


def unusable_values(data: Any, lines: dict[str, int], source: str) -> list[str]:
    """Problems no validator downstream can handle, anywhere in a parsed file.

    inf/nan floats (TOML allows them; a price or a CPU count never is) and strings holding a
    NUL character (the OS cannot pass them to a process or store them in a path).
    """
    problems: list[str] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack and len(problems) < 20:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}" if key else str(k), v) for k, v in value.items())
            for k in value:
                if "\x00" in str(k):
                    problems.append(
                        _at(source, key or "(top level)", lines, "a key contains a NUL character")
                    )
        elif isinstance(value, list):
            stack.extend((f"{key}.{i}", v) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(
                _at(source, key, lines, f"{value} is not allowed here; give a finite number")
            )
        elif isinstance(value, str) and "\x00" in value:
            problems.append(_at(source, key, lines, "contains a NUL character (\\u0000)"))
    return sorted(problems)


def _at(source: str, key: str, lines: dict[str, int], msg: str) -> str:
    line = lines.get(key)
    if line is None and "." in key:  # a list element: the list's own line
        line = lines.get(key.rsplit(".", 1)[0])
    shown = clean(key, 80)
    where = f"{shown} (line {line})" if line else shown
    return f"{clean(source, 200)}: {where}: {msg}"


def key_lines(text: str) -> dict[str, int]:
    """Map dotted keys ('daemon.reconcile_interval', 'budgets.0.limit_usd') to their line.

    Plain string operations only: it runs on whatever a user wrote, so it must stay linear.
    """
    lines: dict[str, int] = {}
    prefix = ""
    arrays: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            is_array = line.startswith("[[")
            body = line[2:] if is_array else line[1:]
            end = body.find("]")
            if end < 0:
                continue
            name = _dotted(body[:end])
            if is_array:
                arrays[name] = arrays.get(name, -1) + 1
                prefix = f"{name}.{arrays[name]}"
            else:
                prefix = name
            lines.setdefault(prefix, n)
            continue
        eq = line.find("=")
        if eq <= 0:
            continue
        key = _dotted(line[:eq])
        if key:
            lines[f"{prefix}.{key}" if prefix else key] = n
    return lines


def _dotted(text: str) -> str:
    """'a . "b"' -> 'a.b' (TOML dotted and quoted keys, as pydantic's error loc shows them)."""
    return ".".join(p.strip().strip("\"'") for p in text.split("."))
