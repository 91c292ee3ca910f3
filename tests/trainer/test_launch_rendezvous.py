"""The argv the trainer launcher hands torchrun, single node and gang (no processes started)."""

from __future__ import annotations

import signal
import sys

import pytest

from trainer import EXIT_USAGE
from trainer import launch as launch_mod

pytestmark = pytest.mark.timeout(30)

GANG = {
    "SPOTWISE_NNODES": "3",
    "SPOTWISE_NODE_RANK": "2",
    "SPOTWISE_RDZV_ENDPOINT": "10.0.0.5:29400",
    "SPOTWISE_RDZV_ID": "att-7",
}


class FakePopen:
    """Records the command instead of running it; exits 0 at once."""

    calls: list[list[str]] = []

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        FakePopen.calls.append(cmd)
        self.env = env

    def wait(self) -> int:
        return 0

    def send_signal(self, signum: int) -> None:  # pragma: no cover - not signalled here
        raise AssertionError(f"unexpected signal {signum}")


@pytest.fixture
def torchrun_argv(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    FakePopen.calls = []
    monkeypatch.setattr(launch_mod.subprocess, "Popen", FakePopen)
    for key in [*GANG, "LOCAL_RANK"]:
        monkeypatch.delenv(key, raising=False)
    return FakePopen.calls


def test_one_node_is_a_private_loopback_rendezvous() -> None:
    assert launch_mod.rendezvous_args(1, GANG) == [
        "--nnodes=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
    ]


def test_a_gang_node_joins_the_static_rendezvous_with_its_own_rank() -> None:
    """Static: global rank = node_rank * G + local_rank on every attempt (exact resume)."""
    assert launch_mod.rendezvous_args(3, GANG) == [
        "--nnodes=3",
        "--node-rank=2",
        "--rdzv-backend=static",
        "--rdzv-endpoint=10.0.0.5:29400",
        "--rdzv-id=att-7",
    ]


@pytest.mark.parametrize(
    ("drop", "override", "needle"),
    [
        ("SPOTWISE_RDZV_ENDPOINT", {}, "SPOTWISE_RDZV_ENDPOINT"),
        ("SPOTWISE_NODE_RANK", {}, "SPOTWISE_NODE_RANK in 0..2, got ''"),
        (None, {"SPOTWISE_NODE_RANK": "3"}, "SPOTWISE_NODE_RANK in 0..2, got '3'"),
        (None, {"SPOTWISE_NODE_RANK": "-1"}, "got '-1'"),
    ],
)
def test_a_gang_without_a_usable_endpoint_or_rank_is_a_usage_error(
    drop: str | None, override: dict[str, str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {k: v for k, v in GANG.items() if k != drop} | override
    with pytest.raises(SystemExit) as e:
        launch_mod.rendezvous_args(3, env)
    assert e.value.code == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainer: error:") and needle in err[0]


def test_the_launcher_passes_the_gang_flags_to_torchrun(
    torchrun_argv: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """$SPOTWISE_NNODES wins over --nnodes (an elastic gang may run on fewer nodes)."""
    for key, value in GANG.items():
        monkeypatch.setenv(key, value)
    previous = signal.getsignal(signal.SIGTERM)
    nnodes = launch_mod.nodes_from_env(4)
    assert launch_mod.launch(2, ["--training.steps", "5"], nnodes=nnodes) == 0
    assert signal.getsignal(signal.SIGTERM) == previous  # the forwarding handler is gone
    (cmd,) = torchrun_argv
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    rdzv = [a for a in cmd if a.startswith(("--nnodes", "--node-rank", "--rdzv", "--nproc"))]
    assert rdzv == [
        "--nproc-per-node=2",
        "--nnodes=3",
        "--node-rank=2",
        "--rdzv-backend=static",
        "--rdzv-endpoint=10.0.0.5:29400",
        "--rdzv-id=att-7",
    ]
    assert cmd[-4:] == ["-m", "trainer", "--training.steps", "5"]


def test_the_launcher_on_one_node_uses_no_gang_flags(torchrun_argv: list[list[str]]) -> None:
    nnodes = launch_mod.nodes_from_env(1)
    assert launch_mod.launch(2, ["--training.steps", "5"], nnodes=nnodes) == 0
    (cmd,) = torchrun_argv
    assert "--rdzv-endpoint=localhost:0" in cmd and not any("node-rank" in a for a in cmd)
