"""The GCP parts of the boot script (providers/boot_script.py): the startup-script metadata.

What GCP adds to the shared script: GCE runs a startup-script on every boot, so the script
marks the attempt started and exits at once on a later boot (unless SPOTWISE_RERUN is set).
Then the VM powers off: GCE shows it TERMINATED without a preemption operation, which the
adapter reads as EXITED; leak collection deletes the stopped VM once its attempt has ended
(list_tagged reports it live: its disk is billed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from providers.boot_script import INSTANCE_LOG, STATE_DIR, BootParts, build
from providers.gcp import ttl
from providers.instance_output import InstanceOutput

# GCE metadata: a single value is at most 256 KB, all metadata at most 512 KB.
MAX_SCRIPT = 256 * 1024

_RUN_ONCE = f"""if [ -e "${{SPOTWISE_STATE_DIR:-{STATE_DIR}}}/started" ] \\
   && [ -z "${{SPOTWISE_RERUN:-}}" ]; then
  exit 0  # startup-scripts run on every boot; one attempt runs once
fi
"""

PARTS = BootParts(
    cloud="gcp",
    script_name="startup-script",
    max_bytes=MAX_SCRIPT,
    limit_name="GCE's 256 KB metadata value limit",
    record_attempts=ttl.RECORD_ATTEMPTS,
    record_retry_delay_s=int(ttl.RECORD_RETRY_DELAY.total_seconds()),
    finale="then powers off (GCE then shows the VM TERMINATED; spotwise deletes it later).",
    run_once=_RUN_ONCE,
    mark_started='touch "$state/started"\n',
)


# What `spotwise logs` prints for an attempt on GCE: the startup-script's log on the VM, and
# the serial port output fetched without logging in.
OUTPUT = InstanceOutput(
    log_path=INSTANCE_LOG,
    console_command="gcloud compute instances get-serial-port-output {id} --zone {zone}",
)


def build_startup_script(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    poweroff: bool = True,
    gpus: int = 0,
    gang: bool = False,
) -> str:
    """A bash script running `command` with `env` exported; LaunchRejected when the request
    cannot be expressed (bad env names, an empty command, over GCE's metadata limit). With
    `gpus`, the job waits (bounded, ttl.GPU_WAIT) for the driver the image installs. With
    `gang`, one script for N VMs: each takes its rank from its own name (`...-n<rank>`)."""
    from providers.gcp.gangs import RANK_FROM_NAME

    wait = int(ttl.GPU_WAIT.total_seconds()) if gpus > 0 else 0
    parts = replace(PARTS, metadata=RANK_FROM_NAME) if gang else PARTS
    return build(parts, command, env, poweroff=poweroff, gpu_wait_s=wait)
