"""Exit records for the instance's wrapper: ``exits/<N>.json`` in the checkpoint store.

``python -m trainer.outcome --uri URI --attempt N -- CMD ARGS...`` runs CMD (an argv, no
shell), forwards SIGTERM/SIGINT to it, writes ``exits/<N>.json`` (``contract.exit_doc``)
and exits with CMD's code; a CMD killed by signal S is recorded (and exits) as 128 + S, as a
shell reports it. ``python -m trainer.outcome record --uri URI --attempt N --exit-code RC``
only writes the record. Stdlib plus the trainer's store (boto3 for s3://, gcsfs for gs://,
adlfs for az://): it runs on hosts without torch.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from types import FrameType

from trainer import EXIT_FAILED, EXIT_USAGE, contract
from trainer.launch import FORWARDED, exit_status
from trainer.storage import open_store

PROG = "python -m trainer.outcome"


def record(uri: str, attempt: int, exit_code: int) -> None:
    """Write ``exits/<attempt>.json`` atomically into the store at ``uri``, naming the job
    ($SPOTWISE_JOB_ID) so the daemon never takes another job's record for its own."""
    doc = contract.exit_doc(attempt, exit_code, contract.my_job())
    open_store(uri).write_text(contract.exit_name(attempt), doc)


def run_and_record(uri: str, attempt: int, cmd: list[str]) -> int:
    """Run ``cmd`` with signals forwarded; record and return its exit status."""
    open_store(uri)  # a bad URI is a usage error before CMD runs, not after hours of training
    received: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if child is not None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        try:
            child = subprocess.Popen(cmd)
        except OSError as e:
            print(f"{PROG}: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
            code = 127
        else:
            if received:
                child.send_signal(received[-1])
            code = exit_status(child.wait())
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    try:
        record(uri, attempt, code)
    except Exception as e:  # boto3 raises its own types; CMD's code still counts
        print(f"{PROG}: error: could not write {contract.exit_name(attempt)}: {e}", file=sys.stderr)
    return code


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Run CMD and record how it ended in <uri>/exits/<attempt>.json, or "
        "(`record`) only write that record.",
        usage=f"{PROG} --uri URI --attempt N -- CMD [ARGS...]\n"
        f"       {PROG} record --uri URI --attempt N --exit-code RC",
    )
    ap.add_argument(
        "--uri", required=True, help="checkpoint store: path, file://, s3://, gs:// or az://"
    )
    ap.add_argument("--attempt", type=int, required=True, help="attempt number (1, 2, ...)")
    ap.add_argument("--exit-code", type=int, help="record: the exit code to write")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    only_record = bool(argv) and argv[0] == "record"
    ap = _parser()
    try:
        ns = ap.parse_args(argv[1:] if only_record else argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    try:
        contract.parse_uri(ns.uri)
        open_store(ns.uri)  # an az:// store with no account is refused here, before CMD
    except Exception as e:  # ValueError, StoreUnavailable, a store library missing
        print(f"{PROG}: error: --uri: {e}", file=sys.stderr)
        return EXIT_USAGE
    if only_record:
        if ns.exit_code is None or cmd:
            print(f"{PROG}: error: record needs --exit-code RC and no CMD", file=sys.stderr)
            return EXIT_USAGE
        try:
            record(ns.uri, ns.attempt, ns.exit_code)
        except Exception as e:  # boto3 raises its own types
            print(f"{PROG}: error: could not write the exit record: {e}", file=sys.stderr)
            return EXIT_FAILED
        return 0
    if not cmd or ns.exit_code is not None:
        print(f"{PROG}: error: give the command after `--` (or use `record`)", file=sys.stderr)
        return EXIT_USAGE
    return run_and_record(ns.uri, ns.attempt, cmd)


if __name__ == "__main__":
    sys.exit(main())
