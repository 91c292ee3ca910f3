"""Where a cloud instance's job output can be read, as each cloud package states it.

`spotwise show` and `spotwise logs` print, for an attempt on a cloud instance, the path the
boot script wrote the job's stdout and stderr to (on the instance's disk, never uploaded) and
the command that fetches the instance's console output without logging in. Each cloud states
both beside its boot script (providers/<cloud>/userdata.py, startup.py), which loads no SDK;
the scheduler's read models ask here, so they need no table of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.boot_script import INSTANCE_LOG


@dataclass(frozen=True, slots=True)
class InstanceOutput:
    log_path: str  # the job's stdout and stderr, on the instance
    console_command: str  # str.format template over {id}, {region}, {zone}; "" when none

    def console(self, instance_id: str, region: str | None, zone: str | None) -> str | None:
        """The console command for one instance, or None when the cloud has none."""
        if not self.console_command:
            return None
        return self.console_command.format(id=instance_id, region=region, zone=zone)


def instance_output(cloud: str) -> InstanceOutput:
    """The output of an instance on `cloud`; a cloud that states nothing ran the shared boot
    script all the same, so its log path is known and only the console command is missing."""
    if cloud == "aws":
        from providers.aws.userdata import OUTPUT as aws

        return aws
    if cloud == "gcp":
        from providers.gcp.startup import OUTPUT as gcp

        return gcp
    if cloud == "azure":
        from providers.azure.userdata import OUTPUT as azure

        return azure
    return InstanceOutput(log_path=INSTANCE_LOG, console_command="")
