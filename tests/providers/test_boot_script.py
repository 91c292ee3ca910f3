"""The boot script is one template: the three clouds' scripts differ only in the parts each
cloud fills (providers/boot_script.BootParts), and write the job's output to one path."""

from __future__ import annotations

import pytest

from providers.aws import userdata as aws
from providers.azure import userdata as azure
from providers.boot_script import INSTANCE_LOG, JOB_LOG, LOG_DIR, BootParts
from providers.gcp import startup as gcp

COMMAND = ["python3", "train.py", "--epochs", "3", "it's quoted"]
ENVS = [
    {"SPOTWISE_JOB_ID": "j1"},
    {"SPOTWISE_JOB_ID": "j1", "SPOTWISE_ATTEMPT": "2", "SPOTWISE_CHECKPOINT_URI": "s3://b/j1"},
    {"SPOTWISE_ATTEMPT": "3", "SPOTWISE_CHECKPOINT_URI": "/srv/store/j1"},
]


def _shared(script: str, parts: BootParts) -> str:
    """The script without the text its cloud filled in."""
    own = [parts.run_once, parts.mark_started, parts.metadata, parts.tag_exit, parts.finale]
    for text in own:
        if text:
            assert script.count(text) == 1, text
            script = script.replace(text, "")
    return script


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("poweroff", [True, False])
def test_the_three_scripts_share_every_line_they_do_not_fill(
    env: dict[str, str], poweroff: bool
) -> None:
    scripts = {
        "aws": _shared(aws.build_user_data(COMMAND, env, poweroff=poweroff), aws.PARTS),
        "gcp": _shared(gcp.build_startup_script(COMMAND, env, poweroff=poweroff), gcp.PARTS),
        "azure": _shared(azure.build_script(COMMAND, env, poweroff=poweroff), azure.PARTS),
    }
    assert scripts["aws"] == scripts["gcp"] == scripts["azure"]
    shared = scripts["aws"]
    assert shared.startswith("#!/bin/bash\n# Written by spotwise: runs one job attempt")
    assert f'logdir="${{SPOTWISE_LOG_DIR:-{LOG_DIR}}}"' in shared
    assert f'>>"$logdir/{JOB_LOG}"' in shared
    assert f"{LOG_DIR}/{JOB_LOG}" == INSTANCE_LOG


def test_each_cloud_fills_only_its_own_parts() -> None:
    assert aws.PARTS.metadata and aws.PARTS.tag_exit and not aws.PARTS.run_once
    assert gcp.PARTS.run_once and gcp.PARTS.mark_started and not gcp.PARTS.metadata
    assert not (azure.PARTS.run_once or azure.PARTS.metadata or azure.PARTS.tag_exit)
    gang = aws.build_user_data(COMMAND, ENVS[0], gang=True)
    assert "ami-launch-index" in gang and "ami-launch-index" not in aws.PARTS.metadata
