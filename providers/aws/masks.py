"""The shapes of AWS credentials, registered with the one masker (providers/masking.py).

Stdlib only: the daemon masks its log lines with these whether or not boto3 is installed.
"""

from __future__ import annotations

from providers.masking import MASK, key_value, register, rule

RULES = (
    rule(
        "aws-access-key-id",
        r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b",
        MASK,
        "key AKIAABCDEFGHIJKLMNOP was refused",
        "ABCDEFGHIJKLMNOP",
    ),
    # Presigned URLs and SigV4 headers: the signature, the session token, the credential scope.
    rule(
        "aws-signed-request",
        r"(?i)(Signature=|X-Amz-Signature=|X-Amz-Security-Token=|X-Amz-Credential=|Credential=)"
        r"[^\s,&\"']+",
        r"\1" + MASK,
        "GET https://s3/x?X-Amz-Security-Token=FwoGZXIvYXdzEBc&x=1",
        "FwoGZXIvYXdzEBc",
    ),
    key_value(
        "aws-secret-key-value",
        r"(?:aws_)?secret(?:_access)?_key|session_token|x-amz-security-token",
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG",
        "wJalrXUtnFEMI",
    ),
)

register("aws", RULES)
