"""The AWS parts of the boot script (providers/boot_script.py): EC2 user data.

What AWS adds to the shared script: it reads its instance metadata through IMDSv2 (a gang
node's launch index, node 0's private address), and tags itself with the exit code (best
effort, beside the exit record in the checkpoint store). Then the box powers off; with
InstanceInitiatedShutdownBehavior=terminate that ends the instance (and the bill), and EC2
reports Client.InstanceInitiatedShutdown, which the adapter reads as EXITED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from providers.aws import ttl
from providers.boot_script import INSTANCE_LOG, BootParts, build
from providers.instance_output import InstanceOutput

EXIT_CODE_TAG = "spotwise-exit-code"
# EC2 accepts at most 16 KB of user data (before base64).
MAX_USER_DATA = 16 * 1024

# IMDSv2: a session token, then the metadata path.
_IMDS = """imds() {{
  local tok
  tok=$(curl -sf --max-time {imds_s} -X PUT http://169.254.169.254/latest/api/token \\
        -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null) || return 1
  curl -sf --max-time {imds_s} -H "X-aws-ec2-metadata-token: $tok" \\
        "http://169.254.169.254/latest/meta-data/$1" 2>/dev/null
}}
""".format(imds_s=int(ttl.IMDS_TIMEOUT.total_seconds()))

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

_TAG_EXIT = (
    "# Best effort: publish the exit code as a tag (needs ec2:CreateTags and the AWS CLI).\n"
    f"""if command -v aws >/dev/null 2>&1; then
  iid=$(imds instance-id || true)
  region=$(imds placement/region || true)
  if [ -n "$iid" ] && [ -n "$region" ]; then
    aws ec2 create-tags --region "$region" --resources "$iid" \\
        --tags "Key={EXIT_CODE_TAG},Value=$rc" || true
  fi
fi
"""
)

PARTS = BootParts(
    cloud="aws",
    script_name="boot script",
    max_bytes=MAX_USER_DATA,
    limit_name="EC2's 16 KB user-data limit",
    record_attempts=ttl.RECORD_ATTEMPTS,
    record_retry_delay_s=int(ttl.RECORD_RETRY_DELAY.total_seconds()),
    finale="tags it (best effort), then powers off.",
    metadata=_IMDS,
    tag_exit=_TAG_EXIT,
)


# What `spotwise logs` prints for an attempt on EC2: the boot script's log on the instance,
# and the console output (the boot log) fetched without logging in.
OUTPUT = InstanceOutput(
    log_path=INSTANCE_LOG,
    console_command="aws ec2 get-console-output --region {region} --instance-id {id}",
)


def build_user_data(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    poweroff: bool = True,
    gang: bool = False,
    gpus: int = 0,
) -> str:
    """A bash script running `command` with `env` exported; raises LaunchRejected when the
    request cannot be expressed (bad env names, an empty command, over 16 KB). With `gpus`,
    the job waits (bounded, ttl.GPU_WAIT) for the GPU to appear."""
    parts = replace(PARTS, metadata=_IMDS + _NODE) if gang else PARTS
    wait = int(ttl.GPU_WAIT.total_seconds()) if gpus > 0 else 0
    return build(parts, command, env, poweroff=poweroff, gpu_wait_s=wait)
