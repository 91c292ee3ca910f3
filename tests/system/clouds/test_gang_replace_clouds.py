"""A 2-node job through the real daemon and CLI on GCP and Azure (their loopback fakes): it
runs as one gang (one bulkInsert in a compact placement policy; two VMs in one proximity
placement group), the cloud takes node 1, one VM replaces it in the same placement while
node 0 keeps running (one attempt, round 1 in the checkpoint store, a gang_replace event),
and the job finishes, billed per node. Passes run on a simulated clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.providers.gcp.test_gcp_cli_prices import write_config as gcp_config
from tests.system.clouds.test_azure_daemon import cli, status
from tests.system.clouds.test_azure_daemon import write_config as azure_config
from trainer import contract, rendezvous

pytestmark = pytest.mark.timeout(120)
JOB = (
    'name = "gang"\ncommand = ["python", "-m", "trainer", "--nnodes", "2"]\n'
    'gpus = "{gpus}"\nnodes = 2\ngpu_hours = 4\n'
)


def _run(
    gpus: str,
    cfg: Path,
    tmp_path: Path,
    lose: Callable[[str], None],
    finish: Callable[[str], None],
    live: Callable[[], set[str]],
) -> dict[str, Any]:
    """Submit, run, lose node 1, resume with a replacement, finish; the job's detail."""
    from scheduler.core.clock import SimClock
    from scheduler.daemon.process import Daemon

    job_file = tmp_path / "gang.toml"
    job_file.write_text(JOB.format(gpus=gpus))
    clock = SimClock(datetime.now(UTC))
    daemon = Daemon(cfg, clock=clock)
    job_id = json.loads(cli(cfg, "submit", str(job_file), "-o", "json"))["id"]

    def tick(seconds: float = 5, n: int = 1) -> None:
        for _ in range(n):
            clock.advance(seconds)
            daemon._run_task("reconcile")
            daemon._run_task("accrue")

    daemon._run_task("poll_prices")
    tick(n=4)
    assert status(cfg)[job_id]["state"] == "RUNNING"
    (attempt,) = json.loads(cli(cfg, "show", job_id, "-o", "json"))["attempts"]
    nodes = {n["node"]: n["instance_id"] for n in attempt["instances"]}
    assert sorted(nodes) == [0, 1] and set(nodes.values()) <= live()
    tick(600)

    lose(nodes[1])
    tick(n=6)
    detail = json.loads(cli(cfg, "show", job_id, "-o", "json"))
    assert len(detail["attempts"]) == 1, detail["attempts"]  # the gang was not re-placed
    kinds = [e["kind"] for e in detail["events"]]
    assert "gang_replace" in kinds and "gang_stop" not in kinds, kinds
    rows = sorted(detail["attempts"][0]["instances"], key=lambda n: (n["node"], n["round"]))
    assert [(n["node"], n["round"]) for n in rows] == [(0, 0), (1, 0), (1, 1)]
    now = {n["node"]: n["instance_id"] for n in rows}  # each node's newest round
    assert now[0] == nodes[0], "node 0 kept running"
    assert now[1] != nodes[1] and now[1] in live()
    row = status(cfg)[job_id]
    assert row["state"] == "RUNNING" and row["recoveries"] == 0, row
    store = contract.parse_uri(row["checkpoint_uri"])
    doc = rendezvous.parse_round(store.file(rendezvous.round_name(1)).read_text())
    assert (doc.round, doc.nnodes, doc.replaced) == (1, 2, (1,))
    tick(600)

    # Training completes: DONE and the attempt's exit record, both nodes power off.
    assert store.path is not None
    store.file(contract.DONE).parent.mkdir(parents=True, exist_ok=True)
    store.file(contract.DONE).write_text("done\n")
    store.file(contract.exit_name(1)).parent.mkdir(parents=True, exist_ok=True)
    store.file(contract.exit_name(1)).write_text(contract.exit_doc(1, 0))
    for vm in (now[0], now[1]):
        finish(vm)
    tick(n=3)
    assert status(cfg)[job_id]["state"] == "SUCCEEDED"
    return json.loads(cli(cfg, "show", job_id, "-o", "json"))


def _billed_per_node(detail: dict[str, Any]) -> None:
    (a,) = detail["attempts"]
    costs = [n["cost_usd"] for n in a["instances"]]
    assert len(costs) == 3 and all(c > 0 for c in costs)  # two nodes and the replacement
    assert a["cost_usd"] == pytest.approx(sum(costs), abs=5e-6)  # each rounded to 6 places


def test_a_two_node_job_loses_a_node_and_finishes_on_gcp(fake, tmp_path: Path) -> None:
    from providers.gcp.gangs import POLICY_PREFIX

    cfg = gcp_config(tmp_path, fake, '\n[gangs]\nrecovery = "replace"\n')

    def live() -> set[str]:
        return {n for (_, n), v in fake.instances.items() if v.get("status") == "RUNNING"}

    detail = _run("L4:1", cfg, tmp_path, fake.preempt, fake.guest_shutdown, live)
    _billed_per_node(detail)
    (a,) = detail["attempts"]
    replacement = next(n for n in a["instances"] if n["node"] == 1 and n["round"] == 1)
    ((_, policy),) = [k for k in fake.policies if k[1].startswith(POLICY_PREFIX)]
    (vm,) = [v for (_, n), v in fake.instances.items() if n == replacement["instance_id"]]
    assert [p.rsplit("/", 1)[-1] for p in vm["resourcePolicies"]] == [policy]


def test_a_two_node_job_loses_a_node_and_finishes_on_azure(arm, prices, rg, tmp_path) -> None:
    from providers.azure.gangs import GROUP_PREFIX

    cfg = azure_config(tmp_path, arm.url, prices.url, rg)
    cfg.write_text(cfg.read_text() + '\n[gangs]\nrecovery = "replace"\n')

    def live() -> set[str]:
        return {
            str(v["name"]) for (g, _), v in arm.res["virtualmachines"].items()
            if g == rg.lower() and v.get("_power") == "PowerState/running"
        }  # fmt: skip

    groups: list[set[str]] = []

    def lose(vm: str) -> None:
        groups.append({str(x["id"]) for x in _group_members(arm, rg, GROUP_PREFIX)})
        arm.evict(rg, vm)

    detail = _run("T4:1", cfg, tmp_path, lose, lambda vm: arm.power_off(rg, vm), live)
    _billed_per_node(detail)
    (before,) = groups
    assert len(before) == 2  # both nodes were in the one group
    (a,) = detail["attempts"]
    replacement = next(n for n in a["instances"] if n["node"] == 1 and n["round"] == 1)
    vm = arm.vm(rg, replacement["instance_id"])
    assert vm is not None and GROUP_PREFIX in vm["properties"]["proximityPlacementGroup"]["id"]


def _group_members(arm: Any, rg: str, prefix: str) -> list[dict[str, Any]]:
    (group,) = [
        g for (r, name), g in arm.res["proximityplacementgroups"].items()
        if r == rg.lower() and name.startswith(prefix)
    ]  # fmt: skip
    return list(group["properties"].get("virtualMachines", []))
