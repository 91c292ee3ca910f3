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

Gangs: on each of N nodes this wrapper runs one torchrun with the *static* rendezvous at
``$SPOTWISE_RDZV_ENDPOINT`` (node 0's address; node 0's torchrun hosts the store) and
``--node-rank=$SPOTWISE_NODE_RANK``, with one ``$SPOTWISE_RDZV_ID`` per attempt, so the N x G
workers form one process group (NCCL on CUDA, gloo otherwise, chosen by trainer.distributed)
in which global rank = node_rank * G + local_rank on every attempt. (c10d's dynamic
rendezvous numbers nodes by sorted address, so a re-placed gang could get its ranks in another
order; the per-rank state follows the global rank either way, but a fixed layout keeps rank 0
on node 0 and logs comparable across attempts.) Each node's local rank 0 records the code for
its own node, which the stop flag all ranks agree on makes the same everywhere.

Rounds: a node whose torchrun stopped without a signal of its own (the others' common
checkpoint after one node got its notice, or a collective that failed because a node
vanished) does not exit at once when ``$SPOTWISE_RDZV_WAIT_S`` is set: it waits for the
scheduler's next round, in which a replacement takes the lost node's rank, and starts
torchrun again with every rank where it was (``trainer.rendezvous``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import NoReturn

from trainer import EXIT_PREEMPTED, EXIT_USAGE, rendezvous
from trainer.contract import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_URI,
    ENV_NNODES,
    ENV_NODE_RANK,
    ENV_RDZV_ENDPOINT,
    ENV_RDZV_ID,
)
from trainer.rendezvous import FAILURE_WAIT_S

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


def rendezvous_args(
    nnodes: int, env: Mapping[str, str], rnd: int = 0, endpoint: str | None = None
) -> list[str]:
    """torchrun's rendezvous flags: loopback for one node; static, ranked by node, for a gang
    (round `rnd` at `endpoint`, node 0's address for that round, when given)."""
    if nnodes <= 1:
        return ["--nnodes=1", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0"]
    endpoint = endpoint or env.get(ENV_RDZV_ENDPOINT, "")
    if not endpoint:
        _usage(f"--nnodes {nnodes} needs ${ENV_RDZV_ENDPOINT} (node 0's host:port)")
    rank = env.get(ENV_NODE_RANK, "")
    if not rank.isdigit() or int(rank) >= nnodes:
        _usage(f"--nnodes {nnodes} needs ${ENV_NODE_RANK} in 0..{nnodes - 1}, got {rank!r}")
    return [
        f"--nnodes={nnodes}",
        f"--node-rank={int(rank)}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rendezvous.rdzv_id(env.get(ENV_RDZV_ID, 'spotwise'), rnd)}",
    ]


def _usage(message: str) -> NoReturn:
    print(f"trainer: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def launch(
    nproc: int,
    trainer_argv: list[str],
    already_signalled: bool = False,
    target: tuple[str, ...] = ("-m", "trainer"),
    nnodes: int = 1,
) -> int:
    """Run ``target trainer_argv`` on ``nproc`` ranks under torchrun; return rank 0's code.
    A gang node joins the scheduler's later rounds (``Rounds``) rather than exiting when its
    peers' checkpoint or a lost peer stopped it."""
    received: list[int] = [signal.SIGTERM] if already_signalled else []
    children: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if children:
            children[-1].send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        if received:  # a notice before anything started: nothing to lose, resume later
            return EXIT_PREEMPTED
        rounds = Rounds.from_env(nnodes, os.environ)
        rnd = rendezvous.launched_round(os.environ)
        while True:
            endpoint = None
            if rnd > 0 and rounds is not None:
                joined = rounds.join(rnd, lambda: bool(received))
                if joined is None:  # replaced, signalled, or nobody came: resume elsewhere
                    return EXIT_PREEMPTED
                rnd, endpoint = joined
            code = _torchrun(nproc, trainer_argv, target, nnodes, rnd, endpoint, received, children)
            if rounds is None or received or code == 0:
                return code
            nxt = rounds.next(rnd, code, lambda: bool(received))
            if nxt is None:
                return code
            rnd = nxt
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _torchrun(
    nproc: int,
    trainer_argv: list[str],
    target: tuple[str, ...],
    nnodes: int,
    rnd: int,
    endpoint: str | None,
    received: list[int],
    children: list[subprocess.Popen[bytes]],
) -> int:
    """One torchrun (one rendezvous round); rank 0's recorded code, else torchrun's own."""
    fd, exit_file = tempfile.mkstemp(prefix="spotwise-exit-")
    os.close(fd)
    try:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            *rendezvous_args(nnodes, os.environ, rnd, endpoint),
            f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}",
            *target,
            *trainer_argv,
        ]
        env = dict(os.environ, **{EXIT_FILE_ENV: exit_file})
        child = subprocess.Popen(cmd, env=env)
        children.append(child)
        if received:  # arrived while Popen ran: deliver it now
            child.send_signal(received[-1])
        rc = child.wait()
        recorded = Path(exit_file).read_text().strip()
    finally:
        Path(exit_file).unlink(missing_ok=True)
    if recorded.isdigit():
        return int(recorded)
    return EXIT_PREEMPTED if received else exit_status(rc)


class Rounds:
    """A gang node's later rendezvous rounds, read from its checkpoint store (None outside
    the scheduler, for one node, or when the scheduler gave no wait)."""

    def __init__(self, store: rendezvous.TextStore, me: rendezvous.Node, wait_s: float) -> None:
        self.store = store
        self.me = me
        self.wait_s = wait_s

    @classmethod
    def from_env(cls, nnodes: int, env: Mapping[str, str]) -> Rounds | None:
        wait_s = rendezvous.wait_seconds(env)
        uri = env.get(ENV_CHECKPOINT_URI, "")
        attempt, rank = env.get(ENV_ATTEMPT, ""), env.get(ENV_NODE_RANK, "")
        if nnodes <= 1 or wait_s <= 0 or not uri or not attempt.isdigit() or not rank.isdigit():
            return None
        from trainer.storage import open_store

        try:
            store = open_store(uri)
        except (ValueError, OSError) as e:
            print(f"trainer: no rendezvous rounds (checkpoint store: {e})", file=sys.stderr)
            return None
        me = rendezvous.Node(int(attempt), int(rank), nnodes, env.get(ENV_RDZV_ENDPOINT, ""))
        return cls(store, me, wait_s)

    def next(self, after: int, code: int, stop: Callable[[], bool]) -> int | None:
        """The round this node goes on in after `after` stopped with `code`, or None."""
        wait = self.wait_s if code == EXIT_PREEMPTED else min(self.wait_s, FAILURE_WAIT_S)
        print(f"trainer: round {after} ended ({code}); waiting up to {wait:.0f}s for the "
              "scheduler's next round", file=sys.stderr, flush=True)  # fmt: skip
        nxt = rendezvous.next_round(self.store, self.me, after, wait, stop)
        if nxt is None or self.me.node in nxt.replaced:
            return None
        return nxt.round

    def join(self, rnd: int, stop: Callable[[], bool]) -> tuple[int, str] | None:
        return rendezvous.join(self.store, self.me, rnd, self.wait_s, stop)


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
