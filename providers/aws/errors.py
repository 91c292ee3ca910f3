"""Translate botocore failures into the provider's typed errors, with credentials masked.

botocore has already retried throttling and 5xx (its `standard`/`adaptive` retry modes) by the
time an exception reaches us, so what arrives here is final for this call.
"""

from __future__ import annotations

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

from providers.base import (
    CapacityUnavailable,
    FatalError,
    LaunchRejected,
    ProviderError,
    QuotaExceeded,
    Throttled,
    TransientError,
)
from providers.masking import mask_message

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
        if code in QUOTA_CODES:
            out = QuotaExceeded(message, pool)
        elif code in CAPACITY_CODES:
            out = CapacityUnavailable(message, pool)
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


def _safe(secrets: Callable[[], Iterable[str]]) -> list[str]:
    try:
        return [s for s in secrets() if s]
    except Exception:  # resolving credentials must never mask the real error
        return []
