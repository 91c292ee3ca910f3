"""The boot script every cloud runs on its instance, written once: it starts one job attempt,
writes how the job ended into its checkpoint store, and powers the box off.

AWS user data, the GCP startup-script and Azure custom data are the same script; each cloud
fills only what differs (`BootParts`): how it reads its instance metadata (AWS's IMDS, a gang
node's index), how it tags itself with the exit code (EC2 tags), a guard against running
twice (GCE runs startup-scripts on every boot), and its size limit. The command is an argv
list and every word and value is shell-quoted, so nothing in a job file is ever interpreted by
a shell. The exit record, `exits/<N>.json` in `trainer.contract`'s layout, is written by
`python3 -m trainer.outcome` when the image has it, else by the script itself: a temp file
and a rename for a local path, `aws s3 cp` for s3://, and for gs:// and az:// one HTTPS PUT
with curl under the token the instance's metadata server gives its own identity (a GCE
service account, an Azure managed identity), each retried. The record names the job
(`job_id`), so the daemon never takes another job's record for its own.

The job's stdout and stderr go to INSTANCE_LOG on the instance's disk; `spotwise logs` names
that path (providers/instance_output.py).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from trainer.contract import (
    ENV_ATTEMPT,
    ENV_AZURE_ACCOUNT,
    ENV_CHECKPOINT_URI,
    ENV_JOB_ID,
    EXIT_NO_GPU,
    exit_name,
    parse_uri,
)

# Where the script keeps its own state and the job's output, unless the image's environment
# sets SPOTWISE_STATE_DIR / SPOTWISE_LOG_DIR.
STATE_DIR = "/var/lib/spotwise"
LOG_DIR = "/var/log/spotwise"
JOB_LOG = "job.log"
INSTANCE_LOG = f"{LOG_DIR}/{JOB_LOG}"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class BootParts:
    """What one cloud's boot script has of its own; every other line is shared. The text
    parts are inserted as written (no str.format escapes) and end with a newline."""

    cloud: str  # "aws": names the cloud in error messages
    script_name: str  # what the cloud calls the script: "boot script", "startup-script"
    max_bytes: int  # the cloud's limit on the script's size
    limit_name: str  # that limit in words: "EC2's 16 KB user-data limit"
    record_attempts: int  # tries at writing the exit record to s3 (ttl.RECORD_ATTEMPTS)
    record_retry_delay_s: int  # seconds between those tries
    finale: str = "then powers off."  # ends the script's opening comment
    run_once: str = ""  # before anything else: exit if the attempt already ran on this box
    mark_started: str = ""  # once the state directory exists: note that the attempt ran
    metadata: str = ""  # before the job: how the script reads its instance's metadata
    tag_exit: str = ""  # after the record: how the instance tags itself with the exit code


# Runs the job and records how it ended; a str.format fragment of _TEMPLATE: it needs {argv}
# (quoted words), {outcome_ok}, {record} (the lines from record_lines) and {job_log}, and
# $state / $logdir set before it.
_RUN_AND_RECORD = """argv=( {argv} )
{gpu_gate}recorded=0
if {outcome_ok}python3 -c 'import trainer.outcome' >/dev/null 2>&1; then
  python3 -m trainer.outcome --uri "$SPOTWISE_CHECKPOINT_URI" --attempt "$SPOTWISE_ATTEMPT" \\
      -- "${{argv[@]}}" >>"$logdir/{job_log}" 2>&1
  rc=$?
  recorded=1
else
  ( exec "${{argv[@]}}" ) >>"$logdir/{job_log}" 2>&1
  rc=$?
fi
echo "$rc" > "$state/exit_code"
if [ "$recorded" = 0 ]; then
{record}
fi
"""

# The record, as trainer.contract.exit_doc writes it; rc and the time are filled at run time.
_DOC = (
    'doc=$(printf \'{{"attempt": %d, "exit_code": %d, "at": "%s"{job}}}\' {attempt} "$rc" '
    '"$(date -u +%Y-%m-%dT%H:%M:%SZ)")'
)

_RECORD_FILE = """  {doc}
  d={dir}
  tmp="$d/.{n}.json.tmp"
  if ! {{ mkdir -p "$d" && printf '%s\\n' "$doc" > "$tmp" && mv -f "$tmp" "$d/{n}.json"; }}; then
    echo "spotwise: could not write the exit record to $d" >>"$logdir/{job_log}"
  fi"""

_RECORD_S3 = """  {doc}
  ok=0
  for _ in {attempts}; do
    if printf '%s\\n' "$doc" | aws s3 cp --only-show-errors - {url} >>"$logdir/{job_log}" 2>&1; then
      ok=1; break
    fi
    sleep {delay_s}
  done
  if [ "$ok" != 1 ]; then
    echo "spotwise: could not write the exit record to" {url} >>"$logdir/{job_log}"
  fi"""

# gs:// and az://: the instance's own identity from its metadata server, then one PUT. The
# token is read with sed (no jq or python on a bare image). Shapes: GCE's
# computeMetadata/v1/instance/service-accounts/default/token and Azure IMDS's
# metadata/identity/oauth2/token both answer {"access_token": "...", ...} (Google's "Storing
# and retrieving instance metadata" and Microsoft's "How to use managed identities for
# Azure resources on an Azure VM to acquire an access token").
_TOKEN = 'sed -n \'s/.*"access_token" *: *"\\([^"]*\\)".*/\\1/p\''
_RECORD_CURL = """  {doc}
  ok=0
  for _ in {attempts}; do
    tok=$(curl -sf {token_headers} {token_url} | {token_sed})
    if [ -n "$tok" ] && printf '%s\\n' "$doc" | curl -sf -X {method} \\
        -H "Authorization: Bearer $tok" {put_headers} --data-binary @- {url} >/dev/null; then
      ok=1; break
    fi
    sleep {delay_s}
  done
  if [ "$ok" != 1 ]; then
    echo "spotwise: could not write the exit record to" {shown} >>"$logdir/{job_log}"
  fi"""
_GCE_TOKEN = (
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
)
_AZURE_TOKEN = (
    "'http://169.254.169.254/metadata/identity/oauth2/token"
    "?api-version=2018-02-01&resource=https://storage.azure.com/'"
)

_NO_RECORD = (
    '  echo "spotwise: no checkpoint URI or attempt; exit code not recorded" >>"$logdir/{job_log}"'
)

_TEMPLATE = (
    """#!/bin/bash
# Written by spotwise: runs one job attempt, records its exit code in the checkpoint store,
# {finale}
set -u
{run_once}state="${{SPOTWISE_STATE_DIR:-{state_dir}}}"
logdir="${{SPOTWISE_LOG_DIR:-{log_dir}}}"
mkdir -p "$state" "$logdir"
{mark_started}{exports}
{metadata}{gpu_wait}"""
    + _RUN_AND_RECORD
    + """{tag_exit}{poweroff}
"""
)


def _rejected(text: str) -> Exception:
    """LaunchRejected, imported when raised: `show` and `logs` import this module (through
    each cloud's OUTPUT facts) and need none of the provider contract."""
    from providers.base import LaunchRejected

    return LaunchRejected(text)


def build(
    parts: BootParts,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    poweroff: bool = True,
    gpu_wait_s: int = 0,
) -> str:
    """The bash script running `command` with `env` exported; LaunchRejected when the request
    cannot be expressed (an empty command, bad env names, a bad checkpoint URI, over the
    cloud's size limit). `gpu_wait_s` > 0: a GPU instance, whose job starts only once
    nvidia-smi answers (gpu_wait)."""
    cloud = parts.cloud
    if not command:
        raise _rejected(f"{cloud} launch: the job command is empty")
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        names = ", ".join(json.dumps(k) for k in bad)
        raise _rejected(f"{cloud} launch: invalid environment variable name(s): {names}")
    record, has_record = record_lines(env, cloud, parts.record_attempts, parts.record_retry_delay_s)
    wait, gate = gpu_wait(gpu_wait_s)
    script = _TEMPLATE.format(
        finale=parts.finale,
        run_once=parts.run_once,
        state_dir=STATE_DIR,
        log_dir=LOG_DIR,
        mark_started=parts.mark_started,
        exports="\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in env.items()),
        metadata=parts.metadata,
        gpu_wait=wait,
        gpu_gate=gate,
        argv=" ".join(shlex.quote(str(a)) for a in command),
        # Without a record to write, trainer.outcome has nothing to write either.
        outcome_ok="" if has_record else "false && ",
        record=record,
        job_log=JOB_LOG,
        tag_exit=parts.tag_exit,
        poweroff="shutdown -h now" if poweroff else "",
    )
    size = len(script.encode())
    if size > parts.max_bytes:
        raise _rejected(
            f"{cloud} launch: the {parts.script_name} is {size} bytes, over {parts.limit_name}; "
            "shorten the command or environment"
        )
    return script


# How often the GPU wait asks nvidia-smi (seconds).
GPU_POLL_S = 5

# Defined before the job on a GPU instance: waits for the NVIDIA driver, which some images
# install on first boot (GCP's Deep Learning VM with install-nvidia-driver=True takes
# minutes), bounded by SPOTWISE_GPU_WAIT_S; a GPU that never appears is said in the job's
# log and the attempt ends with EXIT_NO_GPU instead of running the job without CUDA.
_GPU_WAIT = """spotwise_wait_gpu() {{
  local limit="${{SPOTWISE_GPU_WAIT_S:-{limit}}}" waited=0
  until nvidia-smi -L >/dev/null 2>&1; do
    if [ "$waited" -ge "$limit" ]; then
      echo "spotwise: no GPU: nvidia-smi did not answer within ${{limit}}s (no NVIDIA" \\
           "driver on the image?); the job was not started (exit {code})" >>"$logdir/{job_log}"
      return 1
    fi
    sleep "${{SPOTWISE_GPU_POLL_S:-{poll}}}"
    waited=$((waited + ${{SPOTWISE_GPU_POLL_S:-{poll}}}))
  done
}}
"""
# Right after the argv is set: a box without its GPU runs `exit EXIT_NO_GPU` instead, so the
# exit record says why the attempt ended.
_GPU_GATE = "if ! spotwise_wait_gpu; then argv=( /bin/sh -c 'exit {code}' ); fi\n"


def gpu_wait(seconds: int) -> tuple[str, str]:
    """(the wait function, the gate after the argv) for a GPU instance; ("", "") without."""
    if seconds <= 0:
        return "", ""
    wait = _GPU_WAIT.format(limit=int(seconds), code=EXIT_NO_GPU, job_log=JOB_LOG, poll=GPU_POLL_S)
    return wait, _GPU_GATE.format(code=EXIT_NO_GPU)


def record_lines(
    env: Mapping[str, str], cloud: str, attempts: int, retry_delay_s: int
) -> tuple[str, bool]:
    """The script lines writing exits/<N>.json, and whether there is a record to write.
    The script defines `$rc` and `$logdir` before these lines run."""
    uri, attempt = env.get(ENV_CHECKPOINT_URI, ""), env.get(ENV_ATTEMPT, "")
    if not uri or not attempt.isdigit():
        return _NO_RECORD.format(job_log=JOB_LOG), False
    try:
        loc = parse_uri(uri)
    except ValueError as exc:
        raise _rejected(f"{cloud} launch: {exc}") from None
    n = int(attempt)
    job = env.get(ENV_JOB_ID, "")
    # A job id is "j-" and base32; anything else is left out rather than escaped for printf.
    job_field = f', "job_id": "{job}"' if re.fullmatch(r"[A-Za-z0-9_.-]+", job) else ""
    doc = _DOC.format(attempt=n, job=job_field)
    if loc.is_local:
        exits = loc.file(exit_name(n)).parent
        return _RECORD_FILE.format(doc=doc, dir=shlex.quote(str(exits)), n=n, job_log=JOB_LOG), True
    tries = " ".join(str(i) for i in range(1, attempts + 1))
    key = loc.key(exit_name(n))
    if loc.scheme == "s3":
        url = f"s3://{loc.bucket}/{key}"
        return _RECORD_S3.format(doc=doc, url=shlex.quote(url), attempts=tries,
                                 delay_s=retry_delay_s, job_log=JOB_LOG), True  # fmt: skip
    if loc.scheme == "gs":
        put = (
            f"https://storage.googleapis.com/upload/storage/v1/b/{quote(loc.bucket, safe='')}"
            f"/o?uploadType=media&name={quote(key, safe='')}"
        )
        lines = _RECORD_CURL.format(
            doc=doc, attempts=tries, delay_s=retry_delay_s, job_log=JOB_LOG,
            token_headers="-H 'Metadata-Flavor: Google'", token_url=_GCE_TOKEN,
            token_sed=_TOKEN, method="POST",
            put_headers="-H 'Content-Type: application/json'", url=shlex.quote(put),
            shown=shlex.quote(loc.url(exit_name(n))),
        )  # fmt: skip
        return lines, True
    account = loc.account or env.get(ENV_AZURE_ACCOUNT, "")
    if not account:
        raise _rejected(
            f"{cloud} launch: {uri} names no storage account (az://CONTAINER@ACCOUNT/prefix)"
        )
    put = f"https://{account}.blob.core.windows.net/{loc.bucket}/{quote(key)}"
    lines = _RECORD_CURL.format(
        doc=doc, attempts=tries, delay_s=retry_delay_s, job_log=JOB_LOG,
        token_headers="-H Metadata:true", token_url=_AZURE_TOKEN, token_sed=_TOKEN,
        method="PUT", put_headers="-H 'x-ms-blob-type: BlockBlob' -H 'x-ms-version: 2021-08-06'",
        url=shlex.quote(put), shown=shlex.quote(loc.url(exit_name(n))),
    )  # fmt: skip
    return lines, True
