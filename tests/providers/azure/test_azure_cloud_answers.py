"""ARM's answers read as ARM means them, pinned by recorded data (providers/azure/fixtures/,
each row with its source): the wire JSON rather than an SDK generation's model
serialisation, list rows without instance views, Retail Prices rows of every productName
variant, sizes without a GPUs capability and 'WestUS3' casing, tag name rules, sovereign
clouds' token scopes, and the role derived from the ARM calls the adapter makes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from providers.azure import AzureProvider
from providers.azure.fake_arm import FakeArm
from providers.azure.iam import actions
from providers.azure.instances import vm_name
from providers.azure.settings import AzureSettings
from providers.base import TAG_OWNER, EndReason, InstanceState, Market
from tests.support.azure_fixtures import OWNER, request_for
from tests.support.azure_harness import SUB

README = Path("providers/azure/README.md")


def _snake(doc: Any) -> Any:
    """What msrest models' as_dict() gives (azure-mgmt-compute 33 to 37): attribute names in
    snake_case with `properties` flattened away."""
    if isinstance(doc, list):
        return [_snake(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    flat = dict(doc)
    props = flat.pop("properties", None)
    if isinstance(props, dict):
        flat.update(props)
    return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in flat.items()}


def test_vms_are_read_from_the_wire_whatever_the_sdk_models_serialise_to(
    make: Any, arm: FakeArm, rg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The TypeSpec models of azure-mgmt-compute 38+ made to serialise as the msrest ones of
    # 33 to 37 do; at those versions themselves .ci/sdk-floors runs every suite.
    compute_models = pytest.importorskip("azure.mgmt.compute._utils.model_base")
    network_models = pytest.importorskip("azure.mgmt.network._utils.model_base")

    original = compute_models.Model.as_dict
    for module in (compute_models, network_models):
        monkeypatch.setattr(
            module.Model, "as_dict", lambda self, **kw: _snake(original(self, **kw))
        )
    provider = make()
    (inst,) = provider.launch(request_for())
    (seen,) = provider.describe([inst.ref])
    assert (seen.state, seen.market, seen.instance_type) == (
        InstanceState.RUNNING, Market.SPOT, "Standard_NC4as_T4_v3",
    )  # fmt: skip
    arm.power_off(rg, inst.id)  # the boot script's power-off of a Spot VM
    (seen,) = provider.describe([inst.ref])
    assert (seen.state, seen.end_reason, seen.market) == (
        InstanceState.ENDED, EndReason.EXITED, Market.SPOT,
    )  # fmt: skip
    leftovers = [t for t in provider.list_tagged(OWNER) if t.ref.kind.value == "nic"]
    assert leftovers == []  # a NIC in use is never taken for a leftover


def test_a_list_without_instance_views_reads_each_view(make: Any, arm: FakeArm, rg: str) -> None:
    provider = make()
    launched = [provider.launch(request_for(token=f"t{i}"))[0] for i in range(4)]
    arm.list_without_instance_view = True  # rows as VirtualMachines_ListByLocation's example
    arm.power_off(rg, launched[0].id)
    seen = provider.describe([i.ref for i in launched])  # > LIST_OVER refs: one list call
    assert [s.state for s in seen] == [InstanceState.ENDED] + [InstanceState.RUNNING] * 3
    assert seen[0].end_reason is EndReason.EXITED
    views = [p for m, p, _ in arm.requests if m == "GET" and p.endswith("/instanceView")]
    assert len(views) == 4


def _westus3(make: Any) -> dict[tuple[str, Market], Any]:
    provider = make(locations=["westus3"])
    return {(o.instance_type, o.market): o for o in provider.offerings()}


def test_only_linux_vm_rows_of_the_primary_region_price_a_size(make: Any) -> None:
    got = _westus3(make)
    # fixtures/price_rows.json: Cloud Services 3.60, Dedicated 3.40, a non-primary meter
    # 3.30 and a " Win" row 4.10, all newer than the VM row: none may replace 3.06.
    assert got[("Standard_NC6s_v3", Market.ON_DEMAND)].price_per_hour == 3.06
    assert got[("Standard_NC6s_v3", Market.SPOT)].price_per_hour == pytest.approx(0.565488)


def test_sizes_that_were_never_offered(make: Any) -> None:
    got = _westus3(make)
    mi300x = got[("Standard_ND96is_MI300X_v5", Market.ON_DEMAND)]  # no GPUs capability
    assert (mi300x.gpu_model, mi300x.gpu_count, mi300x.price_per_hour) == ("MI300X", 8, 48.0)
    h100 = got[("Standard_ND96is_H100_v5", Market.SPOT)]
    assert (h100.gpu_model, h100.gpu_count, h100.price_per_hour) == ("H100", 8, 26.5465)
    a10 = got[("Standard_NV36adms_A10_v5", Market.ON_DEMAND)]
    assert (a10.gpu_model, a10.gpu_count) == ("A10", 1)
    zones = {o.zone for o in make(locations=["westus3"]).offerings()}
    assert zones == {"westus3-1", "westus3-2", "westus3-3"}  # "WestUS3" in the SKU rows


def test_tag_names_are_sanitised_and_values_kept(make: Any, arm: FakeArm, rg: str) -> None:
    from providers.azure.instances import tag_key

    assert tag_key("team/ml?x") == "team_ml_x"
    provider = make()
    assert provider.capabilities.label("a/b?c&d") == "a/b?c&d"  # values may carry them
    req = request_for(tags={"spotwise-job": "j/1", TAG_OWNER: OWNER, "cost/center": "a&b"})
    provider.launch(req)
    body = arm.vm_puts()[-1]
    assert body["tags"]["cost_center"] == "a&b" and body["tags"]["spotwise-job"] == "j/1"


@pytest.mark.parametrize(
    ("cloud", "arm_url", "authority"),
    [
        ("AzureUSGovernment", "https://management.usgovcloudapi.net", "login.microsoftonline.us"),
        ("AzureChinaCloud", "https://management.chinacloudapi.cn", "login.chinacloudapi.cn"),
    ],
)
def test_a_sovereign_cloud_asks_its_own_authority_for_its_own_scope(
    cloud: str, arm_url: str, authority: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    class Credential:
        def __init__(self, **kwargs: Any) -> None:
            seen.update(kwargs)

        def get_token(self, *scopes: str, **_: Any) -> Any:
            seen["scopes"] = scopes
            raise RuntimeError("no network in tests")

    monkeypatch.setattr("azure.identity.DefaultAzureCredential", Credential)
    settings = AzureSettings.model_validate(
        {"subscription_id": SUB, "resource_group": "rg", "cloud": cloud}
    )
    provider = AzureProvider(settings)
    api = provider._api  # type: ignore[attr-defined]
    compute = api.compute()
    assert seen["authority"] == authority
    assert compute._config.credential_scopes == [f"{arm_url}/.default"]
    # azure-mgmt-compute 38+ keeps it in its config, the older clients in their pipeline.
    base = getattr(compute._config, "base_url", None) or compute._client._base_url
    assert base == arm_url
    assert settings.credential_scope == f"{arm_url}/.default"


def shipped_role() -> dict[str, Any]:
    linked = re.search(r"\]\((role-definition[\w.-]*\.json)\)", README.read_text())
    assert linked, "the README ships no role definition"
    return json.loads((README.parent / linked.group(1)).read_text())


def test_the_shipped_role_grants_every_call_the_adapter_makes(
    make: Any, arm: FakeArm, rg: str
) -> None:
    identity = (
        f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.ManagedIdentity/"
        "userAssignedIdentities/node"
    )
    provider = make(public_ip=True, identity=identity)
    provider.offerings()
    (inst,) = provider.launch(request_for())
    provider.describe([inst.ref])
    # A gang: its proximity placement group, every node put into it, then collected.
    from tests.providers.azure.test_azure_gang import _gang

    gang = provider.launch(_gang(token="answers-gang", n=2))
    provider.describe([i.ref for i in gang])
    provider.terminate([i.ref for i in gang])
    arm.leak(rg, "disks", "left-disk", {TAG_OWNER: OWNER}, "eastus")
    listed = provider.list_tagged(OWNER)
    provider.terminate([t.ref for t in listed])
    provider.preflight()
    arm.requests.append(
        (
            "GET",
            f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/"
            f"Microsoft.Compute/virtualMachines/{vm_name('x')}/instanceView",
            None,
        )
    )
    needed: set[str] = set()
    for method, path, body in arm.requests:
        needed |= actions(method, path, body)
    granted = set(shipped_role()["Actions"])
    assert needed - granted == set()
    assert {"Microsoft.Network/virtualNetworks/subnets/join/action",
            "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
            "Microsoft.Compute/skus/read"} <= needed  # fmt: skip
    assert {"Microsoft.Compute/proximityPlacementGroups/write",
            "Microsoft.Compute/proximityPlacementGroups/read",
            "Microsoft.Compute/proximityPlacementGroups/delete"} <= needed  # fmt: skip


def test_an_authorization_failure_names_the_action_and_marks_no_pool(
    provider: AzureProvider, arm: FakeArm
) -> None:
    from providers.azure.fake_arm import ArmError
    from providers.base import CapacityUnavailable, NotPermitted

    # ARM's message, as "Troubleshoot Azure RBAC" in the Azure docs quotes it.
    arm.fail_create = ArmError(
        403, "AuthorizationFailed",
        "The client '11111111-1111-1111-1111-111111111111' with object id "
        "'11111111-1111-1111-1111-111111111111' does not have authorization to perform "
        "action 'Microsoft.Compute/virtualMachines/write' over scope '/subscriptions/"
        f"{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/x' or the "
        "scope is invalid. If access was recently granted, please refresh your credentials.",
    )  # fmt: skip
    with pytest.raises(NotPermitted) as got:
        provider.launch(request_for())
    assert not isinstance(got.value, CapacityUnavailable)
    assert got.value.permission == "Microsoft.Compute/virtualMachines/write"
    assert "providers/azure/role-definition.json" in str(got.value)
