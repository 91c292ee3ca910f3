"""The shapes of GCP credentials, registered with the one masker (providers/masking.py).

Stdlib only: the daemon masks its log lines with these whether or not the Google SDKs are
installed.
"""

from __future__ import annotations

from providers.masking import MASK, register, rule

RULES = (
    # A service account key file's private key, pasted or echoed whole.
    rule(
        "gcp-private-key",
        r"(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
        MASK,
        '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBg\\n'
        '-----END PRIVATE KEY-----\\n"',
        "MIIEvQIBADANBg",
    ),
    # OAuth access tokens (ya29.) and access_token fields.
    rule(
        "gcp-access-token",
        r"(?i)(ya29\.|access_token[\"'=: ]+)[A-Za-z0-9._\-]+",
        r"\1" + MASK,
        'refresh gave {"access_token": "ya29.a0AfH6SMC-secret"}',
        "a0AfH6SMC-secret",
    ),
    # API keys in a query string.
    rule(
        "gcp-api-key",
        r"([?&]key=)[^&\s]+",
        r"\1" + MASK,
        "GET https://compute.googleapis.com/x?key=AIzaSyD-secret&alt=json",
        "AIzaSyD-secret",
    ),
)

register("gcp", RULES)
