"""A job that follows the spotwise contract through the trainer's store (s3:// or a path).

Like counter.py, but every file goes through `trainer.storage.open_store`, so on s3 it
reaches the store with only what its instance was given ($SPOTWISE_CHECKPOINT_URI and
$SPOTWISE_S3_ENDPOINT_URL from the boot script, credentials from its own chain). Counts to
N, one step every DELAY seconds; each step is a `step-<N>/` checkpoint, then `latest`, then
progress.json. It resumes from `latest` and records where it started in
`starts/<attempt>.json`, so a test can prove a resume did not restart from zero. SIGTERM (the
cloud's notice) makes it stop after the current step and exit 75 ("preempted, resume me").
"""

import json
import os
import signal
import sys
import time

from trainer import contract
from trainer.storage import open_store


def main() -> int:
    total, delay = int(sys.argv[1]), float(sys.argv[2])
    store = open_store(os.environ[contract.ENV_CHECKPOINT_URI])
    attempt = contract.my_attempt()
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    latest = (store.read_text(contract.LATEST) or "").strip()
    step = 0
    if latest:
        state = json.loads(store.read_text(f"{latest}/state.json") or "{}")
        step = int(state["step"])  # a checkpoint that does not load is an error, not a zero
    started = {"attempt": attempt, "latest": latest or None, "from_step": step,
               "cloud": os.environ.get(contract.ENV_CLOUD)}  # fmt: skip
    store.write_text(f"starts/{attempt}.json", json.dumps(started))

    while step < total:
        if stop:
            return contract.EXIT_PREEMPTED
        time.sleep(delay)
        if contract.fenced(store.read_text(contract.OWNER), attempt):
            return contract.EXIT_FENCED
        step += 1
        store.write_text(f"step-{step}/state.json", json.dumps({"step": step}))
        store.write_text(f"step-{step}/.metadata", "")
        store.write_text(contract.LATEST, f"step-{step}")
        store.write_text(
            contract.PROGRESS,
            json.dumps({"step": step, "total_steps": total, "last_checkpoint_step": step}),
        )
    store.write_text(contract.DONE, "done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
