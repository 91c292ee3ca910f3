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


def _run(script: str, tmp_path, *, nvidia_smi: str | None) -> tuple[int, str, dict]:
    """Run a boot script as the instance would (no power-off), with nvidia-smi present and
    answering `nvidia_smi` (a shell body) or absent; (status, job log, exit record)."""
    import json
    import os
    import subprocess

    bindir = tmp_path / "bin"
    bindir.mkdir()
    if nvidia_smi is not None:
        tool = bindir / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        tool.chmod(0o755)
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin", "SPOTWISE_STATE_DIR": str(tmp_path / "state"),
        "SPOTWISE_LOG_DIR": str(tmp_path / "log"), "SPOTWISE_GPU_WAIT_S": "1",
        "SPOTWISE_GPU_POLL_S": "1", "HOME": str(tmp_path),
    }  # fmt: skip
    done = subprocess.run(["bash", "-c", script], env=env, timeout=60, capture_output=True)
    log = (tmp_path / "log" / JOB_LOG).read_text() if (tmp_path / "log" / JOB_LOG).exists() else ""
    record = json.loads((tmp_path / "store" / "exits" / "2.json").read_text())
    assert os.path.exists(tmp_path / "state" / "exit_code")
    return done.returncode, log, record


def _gpu_script(build_fn, tmp_path) -> str:
    env = {"SPOTWISE_ATTEMPT": "2", "SPOTWISE_CHECKPOINT_URI": str(tmp_path / "store")}
    return build_fn(["sh", "-c", "echo trained"], env, poweroff=False, gpus=1)


@pytest.mark.slow  # the wait is real: one second
@pytest.mark.parametrize("build_fn", [azure.build_script, gcp.build_startup_script])
def test_a_gpu_that_never_appears_ends_the_attempt_with_no_gpu(build_fn, tmp_path) -> None:
    from trainer.contract import EXIT_NO_GPU

    _, log, record = _run(_gpu_script(build_fn, tmp_path), tmp_path, nvidia_smi="exit 9")
    assert record["exit_code"] == EXIT_NO_GPU == 77
    assert "no GPU: nvidia-smi did not answer within 1s" in log
    assert "trained" not in log  # the job never ran without its GPU


def test_the_job_starts_once_nvidia_smi_answers(tmp_path) -> None:
    _, log, record = _run(_gpu_script(azure.build_script, tmp_path), tmp_path,
                          nvidia_smi="echo 'GPU 0: NVIDIA A10'")  # fmt: skip
    assert record["exit_code"] == 0 and "trained" in log


def test_cpu_instances_do_not_wait_for_a_gpu() -> None:
    script = azure.build_script(COMMAND, ENVS[1])
    assert "spotwise_wait_gpu" not in script
    assert "spotwise_wait_gpu" in aws.build_user_data(COMMAND, ENVS[1], gpus=8)
