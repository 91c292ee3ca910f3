"""The shapes of Azure credentials, registered with the one masker (providers/masking.py).

Stdlib only: the daemon masks its log lines with these whether or not the Azure SDKs are
installed.
"""

from __future__ import annotations

from providers.masking import key_value, register

RULES = (
    # Service principal secrets in a token request body or a connection string.
    key_value(
        "azure-client-secret",
        r"client_secret",
        "POST /oauth2/v2.0/token grant_type=client_credentials&client_secret=Q~8Q8Q.secret",
        "Q~8Q8Q.secret",
    ),
    # SAS signatures in a storage URL (sig=...), and passwords in query strings.
    key_value(
        "azure-sas-signature",
        r"sig",
        "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=7Zb%2Fsecret%3D&se=2030",
        "7Zb%2Fsecret%3D",
    ),
)

register("azure", RULES)
