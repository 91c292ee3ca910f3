"""The boot script that starts a job on the instance.

The command is an argv list and every word and value is shell-quoted, so nothing in a job
file is ever interpreted by a shell. When the job exits the box powers off; with
InstanceInitiatedShutdownBehavior=terminate that ends the instance (and the bill), and EC2
reports it as Client.InstanceInitiatedShutdown, which the adapter reads as EXITED.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from providers.base import FatalError

EXIT_CODE_TAG = "spotwise-exit-code"
# EC2 accepts at most 16 KB of user data (before base64).
MAX_USER_DATA = 16 * 1024
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TEMPLATE = """#!/bin/bash
# Written by spotwise: runs one job attempt, records its exit code, then powers off.
set -u
mkdir -p /var/lib/spotwise /var/log/spotwise
{exports}
( exec {argv} ) >>/var/log/spotwise/job.log 2>&1
rc=$?
echo "$rc" > /var/lib/spotwise/exit_code
# Best effort: publish the exit code as a tag (needs ec2:CreateTags and the AWS CLI).
if command -v aws >/dev/null 2>&1; then
  tok=$(curl -sf -X PUT http://169.254.169.254/latest/api/token \\
        -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' || true)
  iid=$(curl -sf -H "X-aws-ec2-metadata-token: $tok" \\
        http://169.254.169.254/latest/meta-data/instance-id || true)
  region=$(curl -sf -H "X-aws-ec2-metadata-token: $tok" \\
        http://169.254.169.254/latest/meta-data/placement/region || true)
  if [ -n "$iid" ] && [ -n "$region" ]; then
    aws ec2 create-tags --region "$region" --resources "$iid" \\
        --tags "Key={exit_tag},Value=$rc" || true
  fi
fi
{poweroff}
"""


def build_user_data(
    command: Sequence[str], env: Mapping[str, str], *, poweroff: bool = True
) -> str:
    """A bash script running `command` with `env` exported; raises FatalError if invalid."""
    if not command:
        raise FatalError("aws launch: the job command is empty")
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        raise FatalError(f"aws launch: invalid environment variable name(s): {', '.join(bad)}")
    exports = "\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in env.items())
    script = _TEMPLATE.format(
        exports=exports,
        argv=" ".join(shlex.quote(str(a)) for a in command),
        exit_tag=EXIT_CODE_TAG,
        poweroff="shutdown -h now" if poweroff else "",
    )
    if len(script.encode()) > MAX_USER_DATA:
        raise FatalError(
            f"aws launch: the boot script is {len(script.encode())} bytes, over EC2's 16 KB "
            "user-data limit; shorten the command or environment"
        )
    return script
