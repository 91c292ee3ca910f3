"""Translate google-api-core failures and GCE operation errors into the provider's typed
errors, with credentials masked. Codes are matched in one normal form (UPPER_SNAKE), so the
synchronous reasons ("quotaExceeded") and the operation codes ("QUOTA_EXCEEDED") meet."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from providers.base import (
    CapacityUnavailable,
    FailureKind,
    FatalError,
    LaunchFailure,
    LaunchRejected,
    NotPermitted,
    ProviderError,
    QuotaExceeded,
    SettingRefused,
    Throttled,
    TransientError,
)
from providers.masking import mask_message

# The zone has no room for this shape right now (a stockout): try another pool.
CAPACITY_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_POOL_EXHAUSTED",
        "RESOURCE_NOT_AVAILABLE",
        "UNSUPPORTED_OPERATION_IN_ZONE",
        "STOCKOUT",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "QUOTA_LIMIT_EXCEEDED"})
# The request is wrong (this job's): malformed fields, bad metadata, bad labels.
REJECTED_CODES = frozenset(
    {
        "INVALID_FIELD_VALUE",
        "INVALID",
        "INVALID_ARGUMENT",
        "INVALID_PARAMETER",
        "BAD_REQUEST",
        "REQUIRED",
        "CONDITION_NOT_MET",
        "INVALID_USAGE",
    }
)
THROTTLE_CODES = frozenset({"RATE_LIMIT_EXCEEDED", "USER_RATE_LIMIT_EXCEEDED"})
# Fields the operator configures: a 400 about them is the config's fault, not the job's,
# and names the key to change (first match wins).
_CONFIG_KEYS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), k)
    for p, k in (
        (r"sourceImage|\bimage\b", "image"),
        (r"diskType", "disk_type"),
        (r"diskSizeGb", "disk_size_gb"),
        (r"subnetwork", "subnetwork"),
        (r"networkInterfaces|network\b", "network"),
        (r"serviceAccounts", "service_account"),
        (r"scopes", "scopes"),
    )
)
# GCE's 403: "Required 'compute.instances.create' permission for 'projects/p/zones/z/...'"
_PERMISSION = re.compile(r"Required '([\w.]+)' permission", re.I)
ROLE_FILE = "providers/gcp/iam-role.json"


def config_key(text: str) -> str | None:
    """The [providers.gcp] key a refusal's message is about, or None."""
    key = next((k for p, k in _CONFIG_KEYS if p.search(text)), None)
    return f"[providers.gcp] {key}" if key else None


_STOCKOUT_TEXT = re.compile(
    r"does not have enough resources available|resource pool exhausted|stockout", re.I
)


def norm(code: str) -> str:
    """'quotaExceeded' -> 'QUOTA_EXCEEDED'; 'ZONE_RESOURCE_POOL_EXHAUSTED' unchanged."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", code).upper()


def api_codes(exc: gexc.GoogleAPICallError) -> list[str]:
    out = []
    for e in getattr(exc, "errors", None) or []:
        if isinstance(e, dict):
            out.append(norm(str(e.get("reason") or e.get("code") or "")))
    reason = getattr(exc, "reason", None)
    if reason:
        out.append(norm(str(reason)))
    return [c for c in out if c]


def classify(codes: Iterable[str], message: str, status: int) -> FailureKind | None:
    """The failure kind a launch error means, or None when it is not about the request."""
    codes = set(codes)
    if codes & QUOTA_CODES:
        return FailureKind.QUOTA
    if codes & CAPACITY_CODES or _STOCKOUT_TEXT.search(message):
        return FailureKind.CAPACITY
    if codes & REJECTED_CODES or status == 400:
        return FailureKind.REJECTED
    return None


def translate(
    exc: BaseException,
    *,
    what: str,
    pool: str | None = None,
    secrets: Iterable[str] = (),
    request: bool = False,
) -> ProviderError:
    """Map one google-api-core / google-auth exception to the ProviderError the scheduler
    acts on; `request`: the call carried a job's launch, so a 400 is that job's fault."""
    if isinstance(exc, ProviderError):
        return exc
    message = mask_message(f"gcp {what}: {type(exc).__name__}: {exc}", secrets)
    if isinstance(exc, auth_exc.GoogleAuthError):
        return FatalError(message)
    if not isinstance(exc, gexc.GoogleAPICallError):
        if isinstance(exc, gexc.RetryError | TimeoutError | ConnectionError | OSError):
            return TransientError(message)
        # requests' ConnectionError and friends derive from OSError (IOError).
        return TransientError(message)
    status = int(getattr(exc, "code", 0) or 0)
    codes = api_codes(exc)
    kind = classify(codes, str(exc), status if request else 0)
    if kind is FailureKind.QUOTA:
        return QuotaExceeded(message, pool)
    if kind is FailureKind.CAPACITY:
        return CapacityUnavailable(message, pool)
    if set(codes) & THROTTLE_CODES or status == 429:
        return Throttled(message)
    text = str(getattr(exc, "message", "") or "")
    if status == 403 or isinstance(exc, gexc.Forbidden):
        found = _PERMISSION.search(str(exc))
        permission = found.group(1) if found else ""
        named = f"missing permission {permission}; " if permission else ""
        return NotPermitted(
            f"{message} ({named}the role spotwise needs is {ROLE_FILE}; `spotwise doctor` "
            "checks it)",
            permission,
        )
    if request and kind is FailureKind.REJECTED:
        key = config_key(text)
        if key is None:
            return LaunchRejected(message)
        return SettingRefused(f"{message} (the setting to change: {key})", key)
    if status >= 500 or isinstance(exc, gexc.ServerError):
        return TransientError(message)
    return FatalError(message)  # 401/403/404 on config resources: retrying cannot help


def operation_failure(op: Any, pool: str | None, secrets: Iterable[str] = ()) -> LaunchFailure:
    """The LaunchFailure of a finished insert operation that carries an error."""
    errs = list(getattr(getattr(op, "error", None), "errors", []) or [])
    codes = [norm(str(e.code)) for e in errs if getattr(e, "code", "")]
    text = "; ".join(f"{e.code}: {e.message}" for e in errs) or str(
        getattr(op, "http_error_message", "") or "operation failed"
    )
    status = int(getattr(op, "http_error_status_code", 0) or 0)
    kind = classify(codes, text, status) or (
        FailureKind.CAPACITY if status == 503 else FailureKind.FATAL
    )
    key = config_key(text) if kind is FailureKind.REJECTED else None
    if key is not None:  # the operator's setting, the same in every pool
        kind = FailureKind.SETUP
        text = f"{text} (the setting to change: {key})"
    return LaunchFailure(kind, mask_message(f"gcp insert: {text}", secrets), pool=pool)
