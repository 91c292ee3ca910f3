"""The boot script that starts a job on the instance and records how it ended.

The command is an argv list and every word and value is shell-quoted, so nothing in a job
file is ever interpreted by a shell. The exit code goes to the checkpoint store as
``exits/<N>.json`` (trainer/contract.py), the one record the scheduler reads whatever the
cloud: through ``python3 -m trainer.outcome`` when the box has it, else written by the
script itself (``aws s3 cp`` for s3, a plain file for paths). The exit-code tag stays as a
best-effort extra. Then the box powers off; with InstanceInitiatedShutdownBehavior=terminate
that ends the instance (and the bill), and EC2 reports Client.InstanceInitiatedShutdown,
which the adapter reads as EXITED.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence

from providers.aws import ttl
from providers.base import LaunchRejected
from providers.boot_script import RUN_AND_RECORD, record_lines

EXIT_CODE_TAG = "spotwise-exit-code"
# EC2 accepts at most 16 KB of user data (before base64).
MAX_USER_DATA = 16 * 1024
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TEMPLATE = (
    """#!/bin/bash
# Written by spotwise: runs one job attempt, records its exit code in the checkpoint store,
# tags it (best effort), then powers off.
set -u
state="${{SPOTWISE_STATE_DIR:-/var/lib/spotwise}}"
logdir="${{SPOTWISE_LOG_DIR:-/var/log/spotwise}}"
mkdir -p "$state" "$logdir"
{exports}
imds() {{
  local tok
  tok=$(curl -sf --max-time {imds_s} -X PUT http://169.254.169.254/latest/api/token \\
        -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null) || return 1
  curl -sf --max-time {imds_s} -H "X-aws-ec2-metadata-token: $tok" \\
        "http://169.254.169.254/latest/meta-data/$1" 2>/dev/null
}}
{node}"""
    + RUN_AND_RECORD
    + """# Best effort: publish the exit code as a tag (needs ec2:CreateTags and the AWS CLI).
if command -v aws >/dev/null 2>&1; then
  iid=$(imds instance-id || true)
  region=$(imds placement/region || true)
  if [ -n "$iid" ] && [ -n "$region" ]; then
    aws ec2 create-tags --region "$region" --resources "$iid" \\
        --tags "Key={exit_tag},Value=$rc" || true
  fi
fi
{poweroff}
"""
)

# Gangs: every node gets the same user data (one RunInstances), so a node learns its index
# from EC2's launch index unless the job set one.
_NODE = """export SPOTWISE_NODE="${SPOTWISE_NODE:-$(imds ami-launch-index || echo 0)}"
export SPOTWISE_NODE_RANK="${SPOTWISE_NODE_RANK:-$SPOTWISE_NODE}"
if [ -z "${SPOTWISE_RDZV_ENDPOINT:-}" ]; then
  # Node 0's private address: its own, or found by the gang's token tag and launch index 0.
  host=""
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if [ "$SPOTWISE_NODE_RANK" = 0 ]; then
      host=$(imds local-ipv4 || true)
    elif command -v aws >/dev/null 2>&1; then
      host=$(aws ec2 describe-instances --region "$(imds placement/region)" \\
        --filters "Name=tag:spotwise-token,Values=${SPOTWISE_GANG_TOKEN:-}" \\
                  "Name=launch-index,Values=0" \\
        --query 'Reservations[0].Instances[0].PrivateIpAddress' --output text 2>/dev/null \\
        | grep -v None || true)
    fi
    [ -n "$host" ] && break
    sleep 6
  done
  export SPOTWISE_RDZV_ENDPOINT="${host:-127.0.0.1}:${SPOTWISE_RDZV_PORT:-29400}"
fi
"""


def _record(env: Mapping[str, str]) -> tuple[str, bool]:
    return record_lines(
        env, "aws", ttl.RECORD_ATTEMPTS, int(ttl.RECORD_RETRY_DELAY.total_seconds())
    )


def build_user_data(
    command: Sequence[str], env: Mapping[str, str], *, poweroff: bool = True, gang: bool = False
) -> str:
    """A bash script running `command` with `env` exported; raises LaunchRejected when the
    request cannot be expressed (bad env names, an empty command, over 16 KB)."""
    if not command:
        raise LaunchRejected("aws launch: the job command is empty")
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        names = ", ".join(json.dumps(k) for k in bad)
        raise LaunchRejected(f"aws launch: invalid environment variable name(s): {names}")
    record, has_record = _record(env)
    script = _TEMPLATE.format(
        exports="\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in env.items()),
        node=_NODE if gang else "",
        argv=" ".join(shlex.quote(str(a)) for a in command),
        # Without a record to write, trainer.outcome has nothing to write either.
        outcome_ok="" if has_record else "false && ",
        record=record,
        exit_tag=EXIT_CODE_TAG,
        imds_s=int(ttl.IMDS_TIMEOUT.total_seconds()),
        poweroff="shutdown -h now" if poweroff else "",
    )
    size = len(script.encode())
    if size > MAX_USER_DATA:
        raise LaunchRejected(
            f"aws launch: the boot script is {size} bytes, over EC2's 16 KB user-data limit; "
            "shorten the command or environment"
        )
    return script
