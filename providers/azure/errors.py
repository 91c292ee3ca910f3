"""Translate azure-core failures into the provider's typed errors, with credentials masked.

azure-core's retry policy has already retried 429 and 5xx (`max_retries`) by the time an
exception reaches us, so what arrives here is final for this call. The same code tables
read the errors that arrive later, in a failed VM's instance view (`failure_kind`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

from providers.base import (
    CapacityUnavailable,
    FailureKind,
    FatalError,
    LaunchRejected,
    NotPermitted,
    ProviderError,
    QuotaExceeded,
    SettingRefused,
    Throttled,
    TransientError,
)
from providers.masking import mask_message

# The size has no room in that location/zone right now: try another offering.
CAPACITY_CODES = frozenset(
    {
        "SkuNotAvailable",
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
        "SpotMaxPriceTooLow",  # maxPrice below the current spot price
        "MaxPriceLowerThanCurrentPrice",
    }
)
# Subscription limits (vCPU family, regional, Spot/low-priority cores).
QUOTA_CODES = frozenset(
    {"QuotaExceeded", "LowPriorityQuotaExceeded", "SpotQuotaExceeded", "OperationNotAllowed"}
)
# The operator's config or the account: every launch would fail the same way.
FATAL_CODES = frozenset(
    {
        "AuthorizationFailed",
        "AuthenticationFailed",
        "InvalidAuthenticationToken",
        "InvalidAuthenticationTokenTenant",
        "LinkedAuthorizationFailed",
        "SubscriptionNotFound",
        "ResourceGroupNotFound",
        "ImageNotFound",
        "PlatformImageNotFound",
        "InvalidResourceReference",  # a configured subnet or identity that does not exist
        "MissingSubscriptionRegistration",
        "DisallowedByPolicy",
        "RequestDisallowedByPolicy",
    }
)
THROTTLE_CODES = frozenset({"TooManyRequests", "RetryableError", "Throttled"})
# The caller lacks an action: ARM's message names it ("The client '<id>' with object id
# '<oid>' does not have authorization to perform action '<action>' over scope '<scope>' or
# the scope is invalid."). No pool is at fault.
DENIED_CODES = frozenset({"AuthorizationFailed", "LinkedAuthorizationFailed"})
_ACTION = re.compile(r"perform action '([^']+)'")
ROLE_FILE = "providers/azure/role-definition.json"
# An operator setting ARM refuses, and the key that holds it.
SETTING_CODES = {
    "ImageNotFound": "image",
    "PlatformImageNotFound": "image",
    "InvalidResourceReference": "subnet_id",
}


def error_code(exc: BaseException) -> str:
    if isinstance(exc, HttpResponseError):
        err = getattr(exc, "error", None)
        code = getattr(err, "code", None) if err is not None else None
        if code:
            return str(code)
        return str(getattr(exc, "reason", "") or type(exc).__name__)
    return type(exc).__name__


def failure_kind(code: str, message: str = "") -> FailureKind | None:
    """Capacity or quota for a provisioning error code (sync or from a failed VM), else None."""
    if code in QUOTA_CODES and (code != "OperationNotAllowed" or "quota" in message.lower()):
        return FailureKind.QUOTA
    if code in CAPACITY_CODES:
        return FailureKind.CAPACITY
    return None


def translate(
    exc: BaseException,
    *,
    what: str,
    pool: str | None = None,
    secrets: Iterable[str] = (),
    request: bool = False,
) -> ProviderError:
    """Map one azure-core exception to the ProviderError the scheduler acts on; `request`:
    the call carried a job's launch request, so a 400 is that job's fault."""
    if isinstance(exc, ProviderError):
        return exc
    code = error_code(exc)
    status = int(getattr(exc, "status_code", 0) or 0)
    err = getattr(exc, "error", None)
    detail = getattr(err, "message", None) or getattr(exc, "message", None) or str(exc)
    message = mask_message(f"azure {what}: {code}: {detail}", secrets)
    out: ProviderError
    kind = failure_kind(code, str(detail))
    if kind is FailureKind.QUOTA:
        out = QuotaExceeded(message, pool)
    elif kind is FailureKind.CAPACITY:
        out = CapacityUnavailable(message, pool)
    elif isinstance(exc, ServiceRequestError) and "non-TLS" in str(exc):
        out = FatalError(
            f"azure {what}: azure-core never sends a token over http; use an https base_url, "
            'or credentials = "anonymous" for a local fake'
        )
    elif code in DENIED_CODES:
        found = _ACTION.search(str(detail))
        action = found.group(1) if found else ""
        named = f"missing permission {action}; " if action else ""
        out = NotPermitted(
            f"{message} ({named}the role spotwise needs is {ROLE_FILE}; `spotwise doctor` "
            "checks it)",
            action,
        )
    elif code in SETTING_CODES:
        key = f"[providers.azure] {SETTING_CODES[code]}"
        out = SettingRefused(f"{message} (the setting to change: {key})", key)
    elif isinstance(exc, ClientAuthenticationError) or code in FATAL_CODES:
        out = FatalError(message)
    elif status == 429 or code in THROTTLE_CODES:
        out = Throttled(message)
    elif status >= 500 or isinstance(exc, ServiceRequestError | ServiceResponseError):
        out = TransientError(message)
    elif request and status == 400:
        out = LaunchRejected(message)
    elif isinstance(exc, ResourceNotFoundError | HttpResponseError | AzureError):
        out = FatalError(message)
    else:
        out = TransientError(message)
    out.azure_code = code  # type: ignore[union-attr,attr-defined]
    return out
