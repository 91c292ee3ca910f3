"""``python -m trainer --nproc-per-node N ...``: torchrun as a child, with our exit codes.

torchrun reports any non-zero worker exit (including our 75) as its own failure (exit 1),
and a SIGTERM it received as another failure. The scheduler needs to tell "preempted, resume
me" from a crash, so this wrapper runs torchrun, forwards SIGTERM/SIGINT to it (torchrun
forwards them to the workers), and returns the exit code rank 0 recorded in
``$SPOTWISE_TRAINER_EXIT_FILE`` when there is one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

EXIT_FILE_ENV = "SPOTWISE_TRAINER_EXIT_FILE"
SHUTDOWN_TIMEOUT_S = 100
"""How long torchrun lets workers checkpoint after SIGTERM before SIGKILL (AWS gives 120 s)."""


def launch(nproc: int, trainer_argv: list[str]) -> int:
    fd, exit_file = tempfile.mkstemp(prefix="spotwise-exit-")
    os.close(fd)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
        f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}",
        "-m",
        "trainer",
        *trainer_argv,
    ]
    env = dict(os.environ, **{EXIT_FILE_ENV: exit_file})
    child = subprocess.Popen(cmd, env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    try:
        recorded = Path(exit_file).read_text().strip()
    finally:
        Path(exit_file).unlink(missing_ok=True)
    return int(recorded) if recorded.isdigit() else rc


def record_exit(code: int) -> None:
    """Called by rank 0 just before it exits with ``code``."""
    path = os.environ.get(EXIT_FILE_ENV)
    if path and os.environ.get("RANK", "0") == "0":
        Path(path).write_text(f"{code}\n")
