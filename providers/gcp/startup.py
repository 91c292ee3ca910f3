"""The startup-script that runs a job attempt on the VM and records how it ended.

Same approach as the AWS boot script: the argv and every environment value are shell-quoted,
the exit code goes to the checkpoint store as ``exits/<N>.json`` through
``python3 -m trainer.outcome`` when the image has it, else written by the script itself (a
plain file for paths, ``aws s3 cp`` for s3). Then the VM powers off: GCE shows it TERMINATED
without a preemption operation, which the adapter reads as EXITED; leak collection deletes
the stopped VM once its attempt has ended (list_tagged reports it live: its disk is billed).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence

from providers.base import LaunchRejected
from providers.boot_script import RUN_AND_RECORD, record_lines
from providers.gcp import ttl

# GCE metadata: a single value is at most 256 KB, all metadata at most 512 KB.
MAX_SCRIPT = 256 * 1024
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TEMPLATE = (
    """#!/bin/bash
# Written by spotwise: runs one job attempt, records its exit code in the checkpoint store,
# then powers off (GCE then shows the VM TERMINATED; spotwise deletes it later).
set -u
if [ -e "${{SPOTWISE_STATE_DIR:-/var/lib/spotwise}}/started" ] \\
   && [ -z "${{SPOTWISE_RERUN:-}}" ]; then
  exit 0  # startup-scripts run on every boot; one attempt runs once
fi
state="${{SPOTWISE_STATE_DIR:-/var/lib/spotwise}}"
logdir="${{SPOTWISE_LOG_DIR:-/var/log/spotwise}}"
mkdir -p "$state" "$logdir"
touch "$state/started"
{exports}
"""
    + RUN_AND_RECORD
    + """{poweroff}
"""
)


def _record(env: Mapping[str, str]) -> tuple[str, bool]:
    return record_lines(
        env, "gcp", ttl.RECORD_ATTEMPTS, int(ttl.RECORD_RETRY_DELAY.total_seconds())
    )


def build_startup_script(
    command: Sequence[str], env: Mapping[str, str], *, poweroff: bool = True
) -> str:
    """A bash script running `command` with `env` exported; LaunchRejected when the request
    cannot be expressed (bad env names, an empty command, over GCE's metadata limit)."""
    if not command:
        raise LaunchRejected("gcp launch: the job command is empty")
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        names = ", ".join(json.dumps(k) for k in bad)
        raise LaunchRejected(f"gcp launch: invalid environment variable name(s): {names}")
    record, has_record = _record(env)
    script = _TEMPLATE.format(
        exports="\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in env.items()),
        argv=" ".join(shlex.quote(str(a)) for a in command),
        outcome_ok="" if has_record else "false && ",
        record=record,
        poweroff="shutdown -h now" if poweroff else "",
    )
    size = len(script.encode())
    if size > MAX_SCRIPT:
        raise LaunchRejected(
            f"gcp launch: the startup-script is {size} bytes, over GCE's 256 KB metadata "
            "value limit; shorten the command or environment"
        )
    return script
