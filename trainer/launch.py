"""``python -m trainer [--nnodes N] --nproc-per-node G ...``: torchrun as a child, with our
exit codes.

torchrun reports any non-zero worker exit (including our 75) as its own failure (exit 1),
and a SIGTERM it received as another failure. The scheduler needs to tell "preempted, resume
me" from a crash, so this wrapper runs torchrun, forwards SIGTERM/SIGINT to it (torchrun
forwards them to the workers), and returns the exit code rank 0 recorded in
``$SPOTWISE_TRAINER_EXIT_FILE`` when there is one.

The handlers are installed *before* torchrun is spawned: a notice in the first seconds
(torchrun or the workers still starting, no handler of theirs installed yet) must still end
in 75. When a signal was forwarded and rank 0 recorded nothing, nothing ran past the last
durable checkpoint that a restart would lose, so 75 ("start me again") is the honest code.

Gangs: on each of N nodes this wrapper runs one torchrun that joins the c10d rendezvous at
``$SPOTWISE_RDZV_ENDPOINT`` (node 0's address; node 0 hosts the store, ``is_host``), with one
``$SPOTWISE_RDZV_ID`` per attempt, so the N x G workers form one process group (NCCL on CUDA,
gloo otherwise, chosen by trainer.distributed). Each node's local rank 0 records the code
for its own node, which the stop flag all ranks agree on makes the same everywhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

from trainer import EXIT_PREEMPTED
from trainer.contract import (
    ENV_NNODES,
    ENV_NODE_ADDR,
    ENV_NODE_RANK,
    ENV_RDZV_ENDPOINT,
    ENV_RDZV_ID,
)

EXIT_FILE_ENV = "SPOTWISE_TRAINER_EXIT_FILE"
SHUTDOWN_TIMEOUT_S = 100
"""How long torchrun lets workers checkpoint after SIGTERM before SIGKILL (AWS gives 120 s)."""
FORWARDED = (signal.SIGTERM, signal.SIGINT)


def exit_status(rc: int) -> int:
    """A Popen return code as a shell would report it (killed by signal N -> 128 + N)."""
    return 128 - rc if rc < 0 else rc


def nodes_from_env(default: int) -> int:
    """The attempt's node count from the scheduler ($SPOTWISE_NNODES), else `default`."""
    value = os.environ.get(ENV_NNODES, "")
    return int(value) if value.isdigit() and int(value) >= 1 else default


def rendezvous_args(nnodes: int, env: dict[str, str] | os._Environ[str]) -> list[str]:
    """torchrun's rendezvous flags: loopback for one node, node 0's endpoint for a gang."""
    if nnodes <= 1:
        return ["--nnodes=1", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0"]
    endpoint = env.get(ENV_RDZV_ENDPOINT, "")
    if not endpoint:
        raise SystemExit(
            f"trainer: error: --nnodes {nnodes} needs ${ENV_RDZV_ENDPOINT} (node 0's host:port)"
        )
    rank = env.get(ENV_NODE_RANK, "0")
    # c10d orders ranks by node address: a provider that can give each node a sortable
    # address (the local market: 127.0.0.<rank + 1>) makes rank r*G.. land on node r every
    # attempt, so a resumed gang reduces in the same order (bit-exact).
    local = [f"--local-addr={env[ENV_NODE_ADDR]}"] if env.get(ENV_NODE_ADDR) else []
    return [
        *local,
        f"--nnodes={nnodes}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={env.get(ENV_RDZV_ID, 'spotwise')}",
        f"--rdzv-conf=is_host={1 if rank == '0' else 0}",
    ]


def launch(
    nproc: int,
    trainer_argv: list[str],
    already_signalled: bool = False,
    target: tuple[str, ...] = ("-m", "trainer"),
    nnodes: int = 1,
) -> int:
    """Run ``target trainer_argv`` on ``nproc`` ranks under torchrun; return rank 0's code."""
    received: list[int] = [signal.SIGTERM] if already_signalled else []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if child is not None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    fd, exit_file = tempfile.mkstemp(prefix="spotwise-exit-")
    os.close(fd)
    try:
        if received:  # a notice before anything started: nothing to lose, resume later
            return EXIT_PREEMPTED
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            *rendezvous_args(nnodes, os.environ),
            f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}",
            *target,
            *trainer_argv,
        ]
        env = dict(os.environ, **{EXIT_FILE_ENV: exit_file})
        child = subprocess.Popen(cmd, env=env)
        if received:  # arrived while Popen ran: deliver it now
            child.send_signal(received[-1])
        rc = child.wait()
        recorded = Path(exit_file).read_text().strip()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        Path(exit_file).unlink(missing_ok=True)
    if recorded.isdigit():
        return int(recorded)
    return EXIT_PREEMPTED if received else exit_status(rc)


def record_exit(code: int) -> None:
    """Called by each node's local rank 0 just before it exits with ``code``."""
    path = os.environ.get(EXIT_FILE_ENV)
    if path and os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")) == "0":
        Path(path).write_text(f"{code}\n")


USAGE = "python -m trainer.launch --nproc-per-node N (-m MODULE | SCRIPT) [ARGS...]"


def main(argv: list[str] | None = None) -> int:
    """Launch your own script (one using ``Preemptible``) keeping 75, as ``-m trainer`` does."""
    argv = list(sys.argv[1:] if argv is None else argv)
    nproc: int | None = None
    if argv and argv[0].startswith("--nproc-per-node"):
        value = argv[0].split("=", 1)[1] if "=" in argv[0] else (argv[1] if len(argv) > 1 else "")
        argv = argv[1:] if "=" in argv[0] else argv[2:]
        nproc = int(value) if value.isdigit() and int(value) > 0 else None
    if nproc is None or not argv or (argv[0] == "-m" and len(argv) < 2):
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    target = tuple(argv[:2]) if argv[0] == "-m" else (argv[0],)
    return launch(nproc, argv[len(target) :], target=target)


if __name__ == "__main__":
    sys.exit(main())
