"""Errors a user can cause, rendered as one clear line instead of a traceback."""

from __future__ import annotations

from pydantic import ValidationError


class UserError(Exception):
    """Bad input from a user (config, job file, CLI argument). The CLI prints it and exits 2."""

    exit_code = 2


def format_validation_error(
    err: ValidationError, source: str, lines: dict[str, int] | None = None
) -> str:
    """One message per problem: '<file>: <dotted.key> (line N): <what is wrong>'."""
    out = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        line = (lines or {}).get(key)
        where = f"{key} (line {line})" if line else key
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        out.append(f"{source}: {where}: {msg}")
    return "\n".join(out)
