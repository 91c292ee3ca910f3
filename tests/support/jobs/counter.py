"""A minimal job that follows the spotwise contract, for end-to-end tests without torch.

Counts to N, one step every DELAY seconds, checkpointing the count after each step. On the
local market's notice file or SIGTERM it saves and exits 75 ("preempted, resume me"). Every start
appends its starting step to starts.log, so a test can prove a resume did not restart from zero.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse


def main() -> int:
    total, delay = int(sys.argv[1]), float(sys.argv[2])
    uri = os.environ["SPOTWISE_CHECKPOINT_URI"]
    root = Path(unquote(urlparse(uri).path)) if uri.startswith("file:") else Path(uri)
    root.mkdir(parents=True, exist_ok=True)
    notice = os.environ.get("SPOTWISE_NOTICE_FILE")
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    ckpt = root / "counter.json"
    step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    with open(root / "starts.log", "a") as f:
        f.write(f"{step} attempt={os.environ.get('SPOTWISE_ATTEMPT')}\n")

    def fenced() -> bool:
        # The contract's fence: a newer attempt owns the store; this one must not write.
        owner = root / "owner.json"
        mine = os.environ.get("SPOTWISE_ATTEMPT", "")
        if not owner.exists() or not mine.isdigit():
            return False
        try:
            return json.loads(owner.read_text()).get("attempt", 0) > int(mine)
        except (ValueError, OSError):
            return False

    def write(name: str, doc: dict) -> None:
        if fenced():
            sys.exit(76)
        tmp = root / (name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, root / name)

    while step < total:
        if stop or (notice and os.path.exists(notice)):
            return 75
        time.sleep(delay)
        step += 1
        write("counter.json", {"step": step})
        write("progress.json", {"step": step, "total_steps": total, "last_checkpoint_step": step})
    (root / "DONE").write_text("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
