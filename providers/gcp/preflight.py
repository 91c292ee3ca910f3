"""`spotwise doctor` for GCP: the project checked with the user's own credentials, nothing
created. Identity (Application Default Credentials and the quota project user credentials
bill to); every permission of the role spotwise needs (projects.testIamPermissions, which
answers with the subset the caller holds); the boot image resolves; the boot disk type is
one the configured machine series take; gangs' compact placement policies can be listed
(and how many of ours exist); the Billing Catalog answers.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import TYPE_CHECKING, Any

from providers.gcp.errors import ROLE_FILE
from providers.gcp.iam import doctor_permissions
from providers.gcp.machine_series import BOOT_DISK_TYPES, DISK_TYPE_KEY, boot_disk_type
from providers.gcp.price_sheet import BILLING_SERVICE
from providers.preflight import Check, Checks

if TYPE_CHECKING:
    from providers.gcp.provider import GcpProvider

CLOUD = "gcp"
_IMAGE = re.compile(
    r"projects/(?P<project>[^/]+)/global/images/(?:family/(?P<family>[^/]+)|(?P<name>[^/]+))$"
)


def role() -> dict[str, Any]:
    text = resources.files("providers.gcp").joinpath("iam-role.json").read_text()
    return json.loads(text)


def preflight(provider: GcpProvider) -> list[Check]:
    checks = Checks(CLOUD)
    api: Any = provider._api
    s = provider.settings
    creds = checks.run(
        "identity", api.credentials,
        "run `gcloud auth application-default login`, or point GOOGLE_APPLICATION_CREDENTIALS "
        "at a service account key",
    )  # fmt: skip
    if creds is None:
        return checks.items
    who = getattr(creds, "service_account_email", None) or (
        "user credentials (ADC)" if "oauth2.credentials" in type(creds).__module__ else
        type(creds).__name__
    )  # fmt: skip
    quota = getattr(creds, "quota_project_id", None)
    checks.ok("identity", f"{who}; quota project {quota or 'none (the credentials own project)'}")
    _permissions(checks, api, s.project)
    _image(checks, api, s.image)
    _disk(checks, s)
    _placement(checks, provider)
    _billing(checks, api, quota)
    return checks.items


def _placement(checks: Checks, provider: GcpProvider) -> None:
    """Gangs' compact placement policies: listable in every configured region (leak
    collection deletes them), and how many of ours exist now."""
    name = "placement policies (gangs)"
    try:
        ours = provider._instances._placement.list_tagged(  # type: ignore[attr-defined]
            provider._instances._caps.label(provider.owner)  # type: ignore[attr-defined]
        )
    except Exception as exc:
        checks.problem(
            name, f"resourcePolicies.list: {type(exc).__name__}: {str(exc)[:200]}",
            f"grant the custom role in {ROLE_FILE} (compute.resourcePolicies.*)",
        )  # fmt: skip
        return
    where = ", ".join(provider.settings.regions)
    checks.ok(name, f"{len(ours)} of ours in {where} (deleted once their gang has ended)")


def _permissions(checks: Checks, api: Any, project: str) -> None:
    wanted = doctor_permissions(role())
    url = f"{api.resource_manager_url}/v1/projects/{project}:testIamPermissions"
    name = f"permissions on project {project}"
    try:
        resp = api.resource_manager().post(url, json={"permissions": wanted},
                                           timeout=api.timeout)  # fmt: skip
        doc = resp.json() if resp.content else {}
    except Exception as exc:
        checks.problem(name, f"testIamPermissions failed: {type(exc).__name__}: {exc}",
                       "enable the Cloud Resource Manager API")  # fmt: skip
        return
    if resp.status_code >= 400:
        message = (doc.get("error") or {}).get("message", resp.text[:200])
        checks.problem(name, f"testIamPermissions answered {resp.status_code}: {message}",
                       "enable the Cloud Resource Manager API on the project")  # fmt: skip
        return
    held = set(doc.get("permissions") or [])
    missing = [p for p in wanted if p not in held]
    if missing:
        checks.problem(
            name, f"missing {', '.join(missing)}",
            f"grant the custom role in {ROLE_FILE} (gcloud iam roles create --file) to the "
            "daemon's identity on the project",
        )  # fmt: skip
        return
    checks.ok(name, f"all {len(wanted)} permissions of {ROLE_FILE} are held")


def _image(checks: Checks, api: Any, image: str) -> None:
    name = "boot image"
    m = _IMAGE.search(image)
    if not m:
        checks.skipped(name, f"{image} is not a projects/P/global/images/... path to look up")
        return
    client = api.compute("ImagesClient")
    try:
        if m.group("family"):
            got = client.get_from_family(
                project=m.group("project"), family=m.group("family"), timeout=api.timeout
            )
        else:
            got = client.get(project=m.group("project"), image=m.group("name"),
                             timeout=api.timeout)  # fmt: skip
    except Exception as exc:
        checks.problem(
            name, f"{image}: {type(exc).__name__}: {str(exc)[:200]}",
            "set [providers.gcp] image to an image or family that exists (Deep Learning VM "
            "families carry a -py310 or -nvidia-5xx suffix)",
        )  # fmt: skip
        return
    checks.ok(name, f"{image} -> {got.name}")


def _disk(checks: Checks, s: Any) -> None:
    name = "boot disk type"
    patterns = s.machine_types or [f"{p}*" for p in BOOT_DISK_TYPES]
    refused = []
    for prefix in BOOT_DISK_TYPES:
        if not any(_overlaps(p, prefix) for p in patterns):
            continue
        try:
            boot_disk_type(f"{prefix}x", s.disk_type)
        except Exception:
            refused.append(prefix.rstrip("-"))
    if refused:
        checks.problem(
            name, f"{s.disk_type} is not a boot disk of {', '.join(refused)} (not offered)",
            f'set {DISK_TYPE_KEY} = "auto"',
        )  # fmt: skip
        return
    checks.ok(name, f"{s.disk_type}: every configured machine series boots from it")


def _overlaps(pattern: str, prefix: str) -> bool:
    import fnmatch

    head = pattern.split("*", 1)[0]
    return (
        head.startswith(prefix) or prefix.startswith(head) or fnmatch.fnmatchcase(prefix, pattern)
    )


def _billing(checks: Checks, api: Any, quota: str | None) -> None:
    from google.cloud import billing_v1

    name = "Billing Catalog (prices)"
    try:
        request = billing_v1.ListSkusRequest(parent=BILLING_SERVICE, page_size=1)
        next(iter(api.billing().list_skus(request=request, timeout=api.timeout)), None)
    except Exception as exc:
        checks.problem(
            name, f"{type(exc).__name__}: {str(exc)[:200]}",
            "enable cloudbilling.googleapis.com; with user credentials set a quota project "
            "([providers.gcp] quota_project) the caller may use (serviceusage.services.use)",
        )  # fmt: skip
        return
    checks.ok(name, f"answers (quota project {quota or 'none'})")
