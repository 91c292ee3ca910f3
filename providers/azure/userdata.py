"""The custom data script that starts a job on the VM and records how it ended.

The same approach as the AWS boot script: the command is an argv list and every word and
value is shell-quoted; the exit code goes to the checkpoint store as ``exits/<N>.json``
(trainer/contract.py) through ``python3 -m trainer.outcome`` when the image has it, else
written by the script itself (a file for paths, ``aws s3 cp`` for s3). cloud-init runs the
script once (custom data starting with ``#!``). Then the box powers off: Azure reports the
VM "stopped" (PowerState/stopped, still provisioned), which the adapter reads as EXITED;
leak collection deletes it once its attempt is over.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping, Sequence

from providers.azure import ttl
from providers.base import LaunchRejected
from providers.boot_script import RUN_AND_RECORD, record_lines

# osProfile.customData: at most 64 KB once decoded.
MAX_CUSTOM_DATA = 64 * 1024 - 1
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TEMPLATE = (
    """#!/bin/bash
# Written by spotwise: runs one job attempt, records its exit code in the checkpoint store,
# then powers off.
set -u
state="${{SPOTWISE_STATE_DIR:-/var/lib/spotwise}}"
logdir="${{SPOTWISE_LOG_DIR:-/var/log/spotwise}}"
mkdir -p "$state" "$logdir"
{exports}
"""
    + RUN_AND_RECORD
    + """{poweroff}
"""
)


def _record(env: Mapping[str, str]) -> tuple[str, bool]:
    return record_lines(
        env, "azure", ttl.RECORD_ATTEMPTS, int(ttl.RECORD_RETRY_DELAY.total_seconds())
    )


def build_script(command: Sequence[str], env: Mapping[str, str], *, poweroff: bool = True) -> str:
    """The bash script; LaunchRejected when the request cannot be expressed."""
    if not command:
        raise LaunchRejected("azure launch: the job command is empty")
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        names = ", ".join(json.dumps(k) for k in bad)
        raise LaunchRejected(f"azure launch: invalid environment variable name(s): {names}")
    record, has_record = _record(env)
    script = _TEMPLATE.format(
        exports="\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in env.items()),
        argv=" ".join(shlex.quote(str(a)) for a in command),
        outcome_ok="" if has_record else "false && ",
        record=record,
        poweroff="shutdown -h now" if poweroff else "",
    )
    size = len(script.encode())
    if size > MAX_CUSTOM_DATA:
        raise LaunchRejected(
            f"azure launch: the boot script is {size} bytes, over Azure's 64 KB custom data "
            "limit; shorten the command or environment"
        )
    return script


def custom_data(command: Sequence[str], env: Mapping[str, str]) -> str:
    """osProfile.customData: the script, base64-encoded as ARM wants it."""
    return base64.b64encode(build_script(command, env).encode()).decode()
