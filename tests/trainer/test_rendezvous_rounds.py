"""A gang node's later rendezvous rounds: after its peers' checkpoint (or a lost peer) stopped
its torchrun, the wrapper waits for the scheduler's round in the checkpoint store, arrives,
waits for every node, and runs torchrun again keeping its node rank (no processes started)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from trainer import EXIT_PREEMPTED, rendezvous
from trainer import launch as launch_mod
from trainer.storage import LocalStore

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _node(k: int, n: int = 2, endpoint: str = "") -> rendezvous.Node:
    return rendezvous.Node(3, k, n, endpoint or (f"10.0.0.{k}:29400" if k == 0 else ""))


def test_a_node_waits_for_a_newer_round_of_its_own_attempt(tmp_path: Path) -> None:
    store, c = LocalStore(tmp_path), Clock()
    store.write_text(rendezvous.round_name(3), rendezvous.round_doc(2, 5, 2, [1]))  # not ours
    assert rendezvous.next_round(store, _node(0), 0, 10, lambda: False, c.now, c.sleep) is None
    assert c.t >= 10
    store.write_text(rendezvous.round_name(3), rendezvous.round_doc(3, 1, 2, [1]))
    got = rendezvous.next_round(store, _node(0), 0, 10, lambda: False, c.now, c.sleep)
    assert got == rendezvous.Round(3, 1, 2, (1,))
    # A signal of its own ends the wait at once.
    c2 = Clock()
    assert rendezvous.next_round(store, _node(0), 1, 60, lambda: True, c2.now, c2.sleep) is None
    assert c2.t == 0


def test_every_node_arrives_and_all_get_node_zeros_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rendezvous, "POLL_S", 0.02)
    store = LocalStore(tmp_path)
    results: dict[int, object] = {}

    def run(k: int) -> None:
        results[k] = rendezvous.join(store, _node(k, 3), 1, 20, lambda: False)

    threads = [threading.Thread(target=run, args=(k,)) for k in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(25)
    assert results == {k: (1, "10.0.0.0:29400") for k in range(3)}
    doc = json.loads(store.read_text(rendezvous.arrival_name(3, 1, 0)) or "{}")
    assert doc["node"] == 0 and doc["endpoint"] == "10.0.0.0:29400"


def test_a_node_waiting_in_a_round_moves_to_a_newer_one_or_leaves_if_replaced(
    tmp_path: Path,
) -> None:
    store, c = LocalStore(tmp_path), Clock()
    store.write_text(rendezvous.round_name(3), rendezvous.round_doc(3, 2, 2, [0]))
    # Node 1 arrives for round 1, sees round 2 (node 0 replaced), arrives there instead.
    store.write_text(rendezvous.arrival_name(3, 2, 0), json.dumps({"node": 0,
                                                                   "endpoint": "e:1"}))  # fmt: skip
    assert rendezvous.join(store, _node(1), 1, 10, lambda: False, c.now, c.sleep) == (2, "e:1")
    assert store.read_text(rendezvous.arrival_name(3, 2, 1)) is not None
    # Node 0 is the one replaced in round 2: it leaves.
    assert rendezvous.join(store, _node(0), 1, 10, lambda: False, c.now, c.sleep) is None


def test_a_round_nobody_completes_times_out(tmp_path: Path) -> None:
    store, c = LocalStore(tmp_path), Clock()
    assert rendezvous.join(store, _node(1), 1, 30, lambda: False, c.now, c.sleep) is None
    assert c.t >= 30


class Torchruns:
    """launch._torchrun replaced: records (round, endpoint) and returns the next code; the
    scheduler's round appears in the store after the first run."""

    def __init__(self, store: LocalStore, codes: list[int], then=None) -> None:
        self.store, self.codes, self.then = store, list(codes), then
        self.runs: list[tuple[int, str | None]] = []

    def __call__(self, nproc, argv, target, nnodes, rnd, endpoint, received, children) -> int:
        self.runs.append((rnd, endpoint))
        if self.then is not None and len(self.runs) == 1:
            self.then()
        return self.codes.pop(0)


@pytest.fixture
def gang_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LocalStore:
    monkeypatch.setenv("SPOTWISE_NNODES", "2")
    monkeypatch.setenv("SPOTWISE_RDZV_ENDPOINT", "127.0.0.1:40001")
    monkeypatch.setenv("SPOTWISE_RDZV_ID", "job-a3")
    monkeypatch.setenv("SPOTWISE_CHECKPOINT_URI", str(tmp_path))
    monkeypatch.setenv("SPOTWISE_ATTEMPT", "3")
    monkeypatch.setenv(rendezvous.ENV_RDZV_WAIT_S, "30")
    monkeypatch.delenv(rendezvous.ENV_RDZV_ROUND, raising=False)
    monkeypatch.setattr(rendezvous, "POLL_S", 0.01)
    return LocalStore(tmp_path)


def test_a_survivor_resumes_in_the_next_round_with_its_rank(
    gang_env: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTWISE_NODE_RANK", "0")
    store = gang_env

    def scheduler_replaces_node_1() -> None:
        store.write_text(rendezvous.round_name(3), rendezvous.round_doc(3, 1, 2, [1]))
        store.write_text(rendezvous.arrival_name(3, 1, 1), json.dumps({"node": 1}))

    runs = Torchruns(store, [EXIT_PREEMPTED, 0], scheduler_replaces_node_1)
    monkeypatch.setattr(launch_mod, "_torchrun", runs)
    assert launch_mod.launch(2, [], nnodes=2) == 0
    assert runs.runs == [(0, None), (1, "127.0.0.1:40001")]  # node 0 hosts round 1 too
    args = launch_mod.rendezvous_args(2, {"SPOTWISE_NODE_RANK": "0", "SPOTWISE_RDZV_ID": "j"},
                                      1, "h:1")  # fmt: skip
    assert "--rdzv-id=j-r1" in args and "--node-rank=0" in args and "--rdzv-endpoint=h:1" in args


def test_a_replacement_joins_its_round_at_node_zeros_endpoint(
    gang_env: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = gang_env
    monkeypatch.setenv("SPOTWISE_NODE_RANK", "1")
    monkeypatch.setenv(rendezvous.ENV_RDZV_ROUND, "1")
    monkeypatch.setenv("SPOTWISE_RDZV_ENDPOINT", "")
    store.write_text(rendezvous.round_name(3), rendezvous.round_doc(3, 1, 2, [1]))
    node0 = json.dumps({"node": 0, "endpoint": "10.1.1.1:29400"})
    store.write_text(rendezvous.arrival_name(3, 1, 0), node0)
    runs = Torchruns(store, [0])
    monkeypatch.setattr(launch_mod, "_torchrun", runs)
    assert launch_mod.launch(2, [], nnodes=2) == 0
    assert runs.runs == [(1, "10.1.1.1:29400")]


def test_the_replaced_node_leaves_and_no_wait_means_the_old_behaviour(
    gang_env: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = gang_env
    monkeypatch.setenv("SPOTWISE_NODE_RANK", "1")

    def replaced() -> None:
        store.write_text(rendezvous.round_name(3), rendezvous.round_doc(3, 1, 2, [1]))

    runs = Torchruns(store, [EXIT_PREEMPTED], replaced)
    monkeypatch.setattr(launch_mod, "_torchrun", runs)
    assert launch_mod.launch(2, [], nnodes=2) == EXIT_PREEMPTED
    assert runs.runs == [(0, None)]
    monkeypatch.setenv(rendezvous.ENV_RDZV_WAIT_S, "0")
    runs = Torchruns(store, [EXIT_PREEMPTED])
    monkeypatch.setattr(launch_mod, "_torchrun", runs)
    assert launch_mod.launch(2, [], nnodes=2) == EXIT_PREEMPTED and len(runs.runs) == 1


def test_a_failed_torchrun_waits_for_a_round_only_briefly(
    gang_env: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTWISE_NODE_RANK", "0")
    monkeypatch.setenv(rendezvous.ENV_RDZV_WAIT_S, "3600")
    waited: list[float] = []

    def next_round(store, me, after, wait_s, stop, *a):  # type: ignore[no-untyped-def]
        waited.append(wait_s)

    monkeypatch.setattr(rendezvous, "next_round", next_round)
    monkeypatch.setattr(launch_mod, "_torchrun", Torchruns(gang_env, [1]))
    assert launch_mod.launch(2, [], nnodes=2) == 1
    assert waited == [rendezvous.FAILURE_WAIT_S]
