"""`spotwise doctor` for Azure: the subscription checked with the user's own credentials,
nothing created. Identity (DefaultAzureCredential asked for the configured cloud's ARM
scope); every action of the role spotwise needs, against the caller's permissions on the
resource group (Permissions - List For Resource Group); the image in each location; a
subnet for each location; the Retail Prices API answers.
"""

from __future__ import annotations

import base64
import json
from importlib import resources
from typing import TYPE_CHECKING, Any

from providers.azure.iam import allows
from providers.azure.instances import image_reference
from providers.preflight import Check, Checks

if TYPE_CHECKING:
    from providers.azure.provider import AzureProvider

CLOUD = "azure"
ROLE_FILE = "providers/azure/role-definition.json"
PERMISSIONS_API = "2022-04-01"


def role() -> dict[str, Any]:
    text = resources.files("providers.azure").joinpath("role-definition.json").read_text()
    return json.loads(text)


def preflight(provider: AzureProvider) -> list[Check]:
    checks = Checks(CLOUD)
    api: Any = provider._api
    s = provider.settings
    token = checks.run(
        "identity",
        lambda: api.credential().get_token(s.credential_scope),
        "sign in (az login, a managed identity, or AZURE_CLIENT_ID/AZURE_TENANT_ID/"
        f"AZURE_CLIENT_SECRET) for {s.cloud}",
    )
    if token is None:
        return checks.items
    checks.ok("identity", f"{s.cloud}: {_who(token.token)}")
    _permissions(checks, api, s)
    for location in s.locations:
        _image(checks, api, s, location)
        if not s.subnet_for(location):
            checks.problem(
                f"subnet in {location}", "no subnet_id for this location: launches fail",
                "set [providers.azure] subnet_id (one, or a table per location)",
            )  # fmt: skip
    _groups(checks, provider)
    _prices(checks, provider, s.locations[0])
    return checks.items


def _groups(checks: Checks, provider: AzureProvider) -> None:
    """Gangs' proximity placement groups: listable in the resource group (leak collection
    deletes them), and how many of ours exist now."""
    name = "proximity placement groups (gangs)"
    try:
        ours = provider._instances._groups.list_tagged(provider.owner)  # type: ignore[attr-defined]
    except Exception as exc:
        checks.problem(
            name, f"{type(exc).__name__}: {str(exc)[:200]}",
            "assign the role in providers/azure/role-definition.json "
            "(Microsoft.Compute/proximityPlacementGroups/*) on the resource group",
        )  # fmt: skip
        return
    rg = provider.settings.resource_group
    checks.ok(name, f"{len(ours)} of ours in {rg} (deleted once their gang has ended)")


def _who(token: str) -> str:
    """The principal a JWT names (oid, app or upn), read without verifying it; 'a token'
    for an opaque one (a local fake's)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return "a token was issued"
    who = claims.get("upn") or claims.get("appid") or claims.get("oid") or "?"
    return f"{who} (tenant {claims.get('tid', '?')})"


def _permissions(checks: Checks, api: Any, s: Any) -> None:
    from azure.core.rest import HttpRequest

    name = f"permissions on resource group {s.resource_group}"
    url = (
        f"{s.arm_url}/subscriptions/{s.subscription_id}/resourceGroups/{s.resource_group}"
        f"/providers/Microsoft.Authorization/permissions?api-version={PERMISSIONS_API}"
    )
    try:
        client = api.compute()
        resp = client._client.send_request(HttpRequest("GET", url))
        resp.read()
    except Exception as exc:
        checks.problem(name, f"{type(exc).__name__}: {str(exc)[:200]}", "see the message")
        return
    if resp.status_code >= 400:
        checks.problem(
            name, f"HTTP {resp.status_code}: {resp.text()[:200]}",
            f"create the resource group {s.resource_group}, or grant the role on it",
        )  # fmt: skip
        return
    grants = resp.json().get("value") or []
    wanted = role()["Actions"]
    missing = [a for a in wanted if not allows(grants, a)]
    if missing:
        checks.problem(
            name, f"missing {', '.join(missing)}",
            f"assign the role in {ROLE_FILE} on the resource group (and the subscription for "
            "Microsoft.Compute/skus/read)",
        )  # fmt: skip
        return
    checks.ok(name, f"all {len(wanted)} actions of {ROLE_FILE} are allowed")


def _image(checks: Checks, api: Any, s: Any, location: str) -> None:
    name = f"image in {location}"
    try:
        ref = image_reference(s.image)
    except Exception as exc:
        checks.problem(name, str(exc), "set [providers.azure] image to a URN or an image id")
        return
    if "id" in ref:
        checks.skipped(name, f"{s.image} is a resource id: read at the first launch")
        return
    try:
        found = api.compute().virtual_machine_images.list(
            location, ref["publisher"], ref["offer"], ref["sku"], top=1
        )
    except Exception as exc:
        checks.problem(
            name, f"{s.image}: {type(exc).__name__}: {str(exc)[:160]}",
            "set [providers.azure] image to a publisher:offer:sku:version offered here",
        )  # fmt: skip
        return
    if not found:
        checks.problem(name, f"{s.image}: no version in {location}", "pick another image")
        return
    checks.ok(name, f"{s.image} is offered in {location}")


def _prices(checks: Checks, provider: AzureProvider, location: str) -> None:
    name = "Retail Prices API"
    try:
        spot, on_demand = provider._offerings._prices.prices(location)  # type: ignore[attr-defined]
    except Exception as exc:
        checks.problem(name, f"{type(exc).__name__}: {str(exc)[:200]}",
                       "let the daemon reach prices_url (no credentials are needed)")  # fmt: skip
        return
    checks.ok(name, f"{len(spot)} spot and {len(on_demand)} on-demand GPU prices in {location}")
