"""``python -m trainer [--nnodes N] [--nproc-per-node G] [--config F] [--section.key VALUE ...]``.

Runs as one plain process, under torchrun, or (with --nproc-per-node) launches torchrun; with
--nnodes (or $SPOTWISE_NNODES, which wins: an elastic gang may run on fewer nodes than its
command says) every node's torchrun joins one c10d rendezvous at $SPOTWISE_RDZV_ENDPOINT.
"""

from __future__ import annotations

import signal

_EARLY: list[int] = []
# Before the heavier imports below: a SIGTERM in the first milliseconds is remembered (and
# becomes exit 75) instead of killing the process with the default action.
signal.signal(signal.SIGTERM, lambda signum, frame: _EARLY.append(signum))

import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from trainer import EXIT_USAGE  # noqa: E402
from trainer.config import ConfigError, parse_args  # noqa: E402
from trainer.preemption import SIGTERM  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse, train, return the exit code (0 done, 75 preempted, 2 usage error)."""
    SIGTERM.install()  # first: a SIGTERM during start-up must still mean "exit 75"
    SIGTERM.received = bool(_EARLY)
    _EARLY.clear()
    argv = list(sys.argv[1:] if argv is None else argv)
    nnodes, argv = _pop_int(argv, "nnodes")
    nproc, argv = _pop_nproc(argv)
    if nnodes is not None and nproc is None:
        nproc = 1
    if nproc is not None and "LOCAL_RANK" not in os.environ:
        from trainer.launch import launch, nodes_from_env

        try:  # launch() replaces our handler with its forwarding one before spawning
            return launch(
                nproc,
                argv,
                already_signalled=SIGTERM.received,
                nnodes=nodes_from_env(nnodes or 1),
            )
        finally:
            SIGTERM.uninstall()
    try:
        cfg = parse_args(argv)
        from trainer.train import run  # torch import only once the command line is valid

        code = run(cfg)
    except ConfigError as e:
        print(f"trainer: error: {e}", file=sys.stderr)
        code = EXIT_USAGE
    from trainer.launch import record_exit

    record_exit(code)
    SIGTERM.uninstall()
    return code


def _pop_nproc(argv: list[str]) -> tuple[int | None, list[str]]:
    """Take ``--nproc-per-node N`` (or ``=N``) out of argv: it selects the torchrun launcher."""
    return _pop_int(argv, "nproc-per-node")


def _pop_int(argv: list[str], name: str) -> tuple[int | None, list[str]]:
    """Take ``--NAME N`` (or ``=N``, or with underscores) out of argv."""
    names = (f"--{name}", f"--{name.replace('-', '_')}")
    out: list[str] = []
    found: int | None = None
    it = iter(argv)
    for arg in it:
        if arg in names:
            value = next(it, "")
        elif arg.startswith(tuple(n + "=" for n in names)):
            value = arg.split("=", 1)[1]
        else:
            out.append(arg)
            continue
        if not value.isdigit() or int(value) < 1:
            print(
                f"trainer: error: --{name} needs a positive integer, got {value!r}",
                file=sys.stderr,
            )
            raise SystemExit(EXIT_USAGE)
        found = int(value)
    return found, out


if __name__ == "__main__":
    exit_code = main()
    # The interpreter's last collections walk every object torch made: seconds on a busy host,
    # paid instance time after the checkpoint is durable and past a short notice's deadline.
    # Frozen objects are skipped; everything still closes and flushes as at any exit.
    gc.freeze()
    sys.exit(exit_code)
