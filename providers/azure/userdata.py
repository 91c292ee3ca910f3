"""The Azure parts of the boot script (providers/boot_script.py): osProfile.customData.

Azure adds nothing to the shared script but its size limit and base64: cloud-init runs the
script once (custom data starting with ``#!``). Then the box powers off: Azure reports the
VM "stopped" (PowerState/stopped, still provisioned), which the adapter reads as EXITED;
leak collection deletes it once its attempt is over.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

from providers.azure import ttl
from providers.boot_script import INSTANCE_LOG, BootParts, build
from providers.instance_output import InstanceOutput

# osProfile.customData: at most 64 KB once decoded.
MAX_CUSTOM_DATA = 64 * 1024 - 1

PARTS = BootParts(
    cloud="azure",
    script_name="boot script",
    max_bytes=MAX_CUSTOM_DATA,
    limit_name="Azure's 64 KB custom data limit",
    record_attempts=ttl.RECORD_ATTEMPTS,
    record_retry_delay_s=int(ttl.RECORD_RETRY_DELAY.total_seconds()),
)


# What `spotwise logs` prints for an attempt on Azure: the boot script's log on the VM, and
# the boot diagnostics log fetched without logging in.
OUTPUT = InstanceOutput(
    log_path=INSTANCE_LOG, console_command="az vm boot-diagnostics get-boot-log --ids {id}"
)


def build_script(
    command: Sequence[str], env: Mapping[str, str], *, poweroff: bool = True, gpus: int = 0
) -> str:
    """The bash script; LaunchRejected when the request cannot be expressed. With `gpus`,
    the job waits (bounded, ttl.GPU_WAIT) for the GPU to appear."""
    wait = int(ttl.GPU_WAIT.total_seconds()) if gpus > 0 else 0
    return build(PARTS, command, env, poweroff=poweroff, gpu_wait_s=wait)


def custom_data(command: Sequence[str], env: Mapping[str, str], *, gpus: int = 0) -> str:
    """osProfile.customData: the script, base64-encoded as ARM wants it."""
    return base64.b64encode(build_script(command, env, gpus=gpus).encode()).decode()
