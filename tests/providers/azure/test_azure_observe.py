"""Observe: eviction vs the job's own exit vs our delete; NOT_FOUND; leak listing and
deletion of what a VM leaves (NICs, disks, public IPs); credentials never printed."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from azure.core.credentials import AccessToken
from azure.core.pipeline.policies import SansIOHTTPPolicy

from providers.base import (
    TAG_ATTEMPT,
    TAG_OWNER,
    EndReason,
    FatalError,
    InstanceState,
    ResourceKind,
    ResourceRef,
)
from tests.support.azure_fixtures import OWNER, request_for

pytestmark = pytest.mark.timeout(60)
SECRET = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLW11c3QtbmV2ZXItYmUtcHJpbnRlZA.sig-9f8e7d6c"


def _running(provider):  # type: ignore[no-untyped-def]
    (inst,) = provider.launch(request_for())
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.RUNNING
    return inst


@pytest.mark.parametrize("stage", ["gone", "deleting"])
def test_an_eviction_is_interrupted(provider, arm, rg, stage) -> None:
    inst = _running(provider)
    arm.evict(rg, inst.id, stage=stage)
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.INTERRUPTED


def test_an_eviction_seen_by_a_fresh_daemon_is_interrupted(make, provider, arm, rg) -> None:
    inst = _running(provider)
    arm.evict(rg, inst.id)
    (seen,) = make().describe([inst.ref])  # no memory of this VM: the ref's launch time
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.INTERRUPTED


def test_the_jobs_own_exit_is_exited(provider, arm, rg) -> None:
    inst = _running(provider)
    arm.power_off(rg, inst.id)  # the boot script's shutdown: PowerState/stopped
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.EXITED
    # Still billed while stopped: listed as live, so leak collection deletes it.
    (mine,) = [t for t in provider.list_tagged(OWNER) if t.ref.id == inst.id]
    assert mine.live


def test_our_delete_is_terminated_and_takes_nic_and_disk(provider, arm, rg) -> None:
    inst = _running(provider)
    provider.list_tagged(OWNER)  # tags the OS disk, which Azure creates untagged
    disk = arm.res["disks"][(rg.lower(), f"{inst.id}-osdisk".lower())]
    assert disk["tags"][TAG_OWNER] == OWNER and disk["tags"][TAG_ATTEMPT] == "j1-2"
    provider.terminate([inst.ref])
    (seen,) = provider.describe([inst.ref])
    assert seen.state is InstanceState.ENDED and seen.end_reason is EndReason.TERMINATED
    assert inst.id not in arm.names("virtualMachines")
    assert f"{inst.id}-nic" not in arm.names("networkInterfaces")
    assert f"{inst.id}-osdisk" not in arm.names("disks")
    provider.terminate([inst.ref])  # again: not an error


def test_unknown_names_are_not_found(provider, rg) -> None:
    ref = ResourceRef("sw-doesnotexist", "eastus", "eastus-1", rg)
    (seen,) = provider.describe([ref])
    assert seen.state is InstanceState.NOT_FOUND and seen.id == ref.id
    assert provider.find_by_token("never-launched") == []
    provider.terminate([ref])


def test_leaked_nics_disks_and_ips_are_listed_and_deleted(make, provider, arm, rg) -> None:
    mine = {TAG_OWNER: OWNER, TAG_ATTEMPT: "old-1"}
    arm.leak(rg, "networkInterfaces", "sw-old-nic", mine, "eastus")
    arm.leak(rg, "disks", "sw-old-osdisk", mine, "eastus")
    arm.leak(rg, "publicIPAddresses", "sw-old-ip", mine, "eastus")
    arm.leak(rg, "disks", "theirs", {TAG_OWNER: "someone-else"}, "eastus")
    live = _running(provider)
    listed = provider.list_tagged(OWNER)
    kinds = {(t.ref.id, t.ref.kind) for t in listed}
    assert {
        ("sw-old-nic", ResourceKind.NIC),
        ("sw-old-osdisk", ResourceKind.DISK),
        ("sw-old-ip", ResourceKind.ADDRESS),
        (live.id, ResourceKind.INSTANCE),
    } <= kinds
    # The live VM's own NIC and disk are not leaks; someone else's disk is not ours.
    assert not {k for k in kinds if k[0] in (f"{live.id}-nic", f"{live.id}-osdisk", "theirs")}
    assert all(t.live and t.tags[TAG_OWNER] == OWNER for t in listed)
    leaks = [t.ref for t in listed if t.ref.kind is not ResourceKind.INSTANCE]
    provider.terminate(leaks)
    assert "sw-old-nic" not in arm.names("networkInterfaces")
    assert "sw-old-ip" not in arm.names("publicIPAddresses")
    assert arm.names("disks") and "sw-old-osdisk" not in arm.names("disks")
    assert "theirs" in arm.names("disks")
    provider.terminate(leaks)  # gone: not an error
    assert {t.ref.id for t in provider.list_tagged(OWNER)} == {live.id}


@pytest.mark.slow
def test_a_public_ip_is_deleted_with_its_vm_or_collected_later(make, arm, rg) -> None:
    p = make(public_ip=True)
    inst = _running(p)
    arm.evict(rg, inst.id)  # Azure deletes the VM, its NIC and disk, not the IP
    left = [t for t in p.list_tagged(OWNER) if t.ref.kind is ResourceKind.ADDRESS]
    assert [t.ref.id for t in left] == [f"{inst.id}-ip"]
    p.terminate([t.ref for t in left])
    assert f"{inst.id}-ip" not in arm.names("publicIPAddresses")
    other = _running(p)
    p.terminate([other.ref])  # our delete takes the IP once the NIC has let go of it
    assert f"{other.id}-ip" not in arm.names("publicIPAddresses")
    assert f"{other.id}-nic" not in arm.names("networkInterfaces")


class _Secret:
    def get_token(self, *_: str, **__: object) -> AccessToken:
        return AccessToken(SECRET, int(datetime.now(UTC).timestamp()) + 3600)


class _PlainBearer(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Sends the token over http (the fake echoes it back in an error)."""

    def __init__(self, cred: object) -> None:
        self._cred = cred

    def on_request(self, request) -> None:  # type: ignore[no-untyped-def]
        tok = self._cred.get_token("https://management.azure.com/.default")  # type: ignore[attr-defined]
        request.http_request.headers["Authorization"] = f"Bearer {tok.token}"


def test_credentials_are_never_printed(make, arm, caplog) -> None:
    from providers.azure.api import _Recording

    cred = _Recording(_Secret())
    p = make(credential=cred, authentication_policy=_PlainBearer(cred))
    arm.echo_auth = True
    with caplog.at_level(logging.DEBUG), pytest.raises(FatalError) as info:
        p.launch(request_for())
    assert SECRET not in str(info.value) and "AuthorizationFailed" in str(info.value)
    with pytest.raises(FatalError) as info2:
        p.list_tagged(OWNER)
    assert SECRET not in str(info2.value)
    assert SECRET not in caplog.text
    assert SECRET not in repr(p) and SECRET not in repr(p.settings)


def test_anonymous_credentials_are_logged_as_a_warning(make, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="spotwise.providers.azure"):
        make()
    assert "anonymous" in caplog.text


def test_a_real_token_is_never_sent_over_http(make, arm) -> None:
    p = make(credential=_Secret())  # the default ARM bearer policy, base_url http://
    n = len(arm.requests)
    with pytest.raises(FatalError) as info:
        p.find_by_token("t")
    assert "http" in str(info.value) and SECRET not in str(info.value)
    assert len(arm.requests) == n


@pytest.mark.slow
def test_many_refs_are_described_with_one_list(provider, arm, rg) -> None:
    launched = [provider.launch(request_for())[0] for _ in range(4)]
    arm.evict(rg, launched[0].id)
    unknown = ResourceRef("sw-unknown", "eastus", "eastus-1", rg)
    n = len(arm.requests)
    seen = provider.describe([i.ref for i in launched] + [unknown])
    calls = arm.requests[n:]
    assert len(calls) == 1 and calls[0][1].endswith("/virtualMachines")
    assert [i.state for i in seen] == [InstanceState.ENDED] + [InstanceState.RUNNING] * 3 + [
        InstanceState.NOT_FOUND
    ]
    assert seen[0].end_reason is EndReason.INTERRUPTED
