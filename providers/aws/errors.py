"""Translate botocore failures into the provider's typed errors, with credentials masked.

botocore has already retried throttling and 5xx (its `standard`/`adaptive` retry modes) by the
time an exception reaches us, so what arrives here is final for this call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from providers.aws.iam import missing_permission
from providers.base import (
    CapacityUnavailable,
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

# The credentials lack a permission: every pool answers the same, so none is marked.
DENIED_CODES = frozenset(
    {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "UnauthorizedAccess"}
)
POLICY_FILE = "providers/aws/iam-policy.json"

# RunInstances' InvalidParameterValue / InvalidParameterCombination name what is wrong in
# their message; most often it is the AMI or the pool, not the job (real messages, each
# with its source, are in tests/providers/aws/fixtures/run_instances_errors.json). First
# match wins: (pattern, the setting it is about, or "" for the pool).
_PARAMETER_BLAME: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), key)
    for p, key in (
        (r"\bAMI\b|architecture|Elastic Network Adapter|\bENA\b|boot ?mode|\bimage\b", "ami"),
        (r"instance ?profile", "instance_profile"),
        (r"\bsubnet", "subnet_ids"),
        (r"security ?group", "security_group_ids"),
        (r"key ?pair|KeyName", "key_name"),
        (r"availability zone|instance type", ""),
    )
)

# The pool has no room (or our price is below the market): try another offering.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "Unsupported",  # the type is not offered in that zone (right now)
        "InsufficientFreeAddressesInSubnet",
    }
)
# An account limit in this region.
QUOTA_CODES = frozenset(
    {
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotFleetRequestCountExceeded",
    }
)
# The request itself is wrong (this job's user data, parameters, placement group): the pool
# is fine for every other job. Only for calls that carry a job's request (RunInstances);
# elsewhere these codes are our bug or the operator's config, so fatal.
REJECTED_CODES = frozenset(
    {
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "InvalidParameter",
        "MissingParameter",
        "InvalidUserData.Malformed",
        "IdempotentParameterMismatch",  # the token was used with other parameters
        "InvalidPlacementGroup.Unknown",
        "InvalidPlacementGroup.InUse",
        "InvalidTagKey.Malformed",
    }
)
# Account or operator config (credentials, permissions, the configured AMI/subnet/key):
# every launch would fail the same way; listed so the intent is explicit (the default for
# unknown 4xx codes is fatal too).
FATAL_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "OptInRequired",
        "Blocked",
        "InvalidAMIID.NotFound",
        "InvalidAMIID.Malformed",
        "InvalidAMIID.Unavailable",
        "InvalidSubnetID.NotFound",
        "InvalidGroup.NotFound",
        "InvalidKeyPair.NotFound",
    }
)
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "EC2ThrottledException",
        "SlowDown",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "RequestExpired",  # usually clock skew or a slow retry; a fresh request may pass
        "IdempotentInstanceTerminated",
    }
)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return type(exc).__name__


def translate(
    exc: BaseException,
    *,
    what: str,
    pool: str | None = None,
    secrets: Callable[[], Iterable[str]] = tuple,
    request: bool = False,
) -> ProviderError:
    """Map one botocore exception to the ProviderError the scheduler acts on; `request`:
    the call carried a job's launch request, so a validation error is that job's fault."""
    if isinstance(exc, ProviderError):
        return exc
    code = error_code(exc)
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        detail = f"{code}: {err.get('Message', '')}".rstrip(": ")
    else:
        status = 0
        detail = f"{code}: {exc}"
    message = mask_message(f"aws {what}: {detail}", _safe(secrets))
    out: ProviderError
    if isinstance(exc, ClientError):
        blame = _blame(code, str(err.get("Message", ""))) if request else None
        if code in DENIED_CODES:
            out = not_permitted(message, str(err.get("Message", "")))
        elif code in QUOTA_CODES:
            out = QuotaExceeded(message, pool)
        elif code in CAPACITY_CODES:
            out = CapacityUnavailable(message, pool)
        elif blame == "":
            out = CapacityUnavailable(message, pool)  # the pool: not offered as asked
        elif blame:
            key = f"[providers.aws] {blame}"
            out = SettingRefused(f"{message} (the setting to change: {key})", key)
        elif request and code in REJECTED_CODES:
            out = LaunchRejected(message)
        elif code in FATAL_CODES:
            out = FatalError(message)
        elif code in THROTTLE_CODES or status == 429:
            out = Throttled(message)
        elif code in TRANSIENT_CODES or status >= 500:
            out = TransientError(message)
        else:  # auth, validation, missing resources: retrying the same call cannot help
            out = FatalError(message)
    elif isinstance(
        exc,
        NoCredentialsError
        | PartialCredentialsError
        | ProfileNotFound
        | NoRegionError
        | ParamValidationError
        | CredentialRetrievalError,
    ):
        out = FatalError(message)
    elif isinstance(exc, BotoConnectionError | HTTPClientError | BotoCoreError):
        out = TransientError(message)
    else:
        out = TransientError(message)
    out.aws_code = code  # type: ignore[attr-defined,union-attr]
    return out


def _blame(code: str, text: str) -> str | None:
    """For a launch's InvalidParameter* error: the setting its message is about ("ami", ...),
    "" when it is about the pool (zone, type), None when it is the job's request."""
    if code not in ("InvalidParameterValue", "InvalidParameterCombination"):
        return None
    return next((key for pattern, key in _PARAMETER_BLAME if pattern.search(text)), None)


def not_permitted(message: str, aws_text: str) -> NotPermitted:
    """A denial that names the permission to grant, from AWS's own message when it says."""
    found = missing_permission(aws_text)
    permission = f"{found[0]} on {found[1]}" if found and found[1] else (found[0] if found else "")
    named = f"missing permission {permission}; " if permission else ""
    return NotPermitted(
        f"{message} ({named}the policy spotwise needs is {POLICY_FILE}; "
        "`spotwise doctor` checks it)",
        permission,
    )


def _safe(secrets: Callable[[], Iterable[str]]) -> list[str]:
    try:
        return [s for s in secrets() if s]
    except Exception:  # resolving credentials must never mask the real error
        return []
