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
from trainer.contract import ENV_ATTEMPT, ENV_CHECKPOINT_URI, exit_name, parse_uri

# osProfile.customData: at most 64 KB once decoded.
MAX_CUSTOM_DATA = 64 * 1024 - 1
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TEMPLATE = """#!/bin/bash
# Written by spotwise: runs one job attempt, records its exit code in the checkpoint store,
# then powers off.
set -u
state="${{SPOTWISE_STATE_DIR:-/var/lib/spotwise}}"
logdir="${{SPOTWISE_LOG_DIR:-/var/log/spotwise}}"
mkdir -p "$state" "$logdir"
{exports}
argv=( {argv} )
recorded=0
if {outcome_ok}python3 -c 'import trainer.outcome' >/dev/null 2>&1; then
  python3 -m trainer.outcome --uri "$SPOTWISE_CHECKPOINT_URI" --attempt "$SPOTWISE_ATTEMPT" \\
      -- "${{argv[@]}}" >>"$logdir/job.log" 2>&1
  rc=$?
  recorded=1
else
  ( exec "${{argv[@]}}" ) >>"$logdir/job.log" 2>&1
  rc=$?
fi
echo "$rc" > "$state/exit_code"
if [ "$recorded" = 0 ]; then
{record}
fi
{poweroff}
"""

_DOC = (
    'doc=$(printf \'{{"attempt": %d, "exit_code": %d, "at": "%s"}}\' {attempt} "$rc" '
    '"$(date -u +%Y-%m-%dT%H:%M:%SZ)")'
)

_RECORD_FILE = """  {doc}
  d={dir}
  tmp="$d/.{n}.json.tmp"
  if ! {{ mkdir -p "$d" && printf '%s\\n' "$doc" > "$tmp" && mv -f "$tmp" "$d/{n}.json"; }}; then
    echo "spotwise: could not write the exit record to $d" >>"$logdir/job.log"
  fi"""

_RECORD_S3 = """  {doc}
  ok=0
  for _ in {attempts}; do
    if printf '%s\\n' "$doc" | aws s3 cp --only-show-errors - {url} >>"$logdir/job.log" 2>&1; then
      ok=1; break
    fi
    sleep {delay_s}
  done
  if [ "$ok" != 1 ]; then
    echo "spotwise: could not write the exit record to" {url} >>"$logdir/job.log"
  fi"""

_NO_RECORD = (
    '  echo "spotwise: no checkpoint URI or attempt; exit code not recorded" >>"$logdir/job.log"'
)


def _record(env: Mapping[str, str]) -> tuple[str, bool]:
    uri, attempt = env.get(ENV_CHECKPOINT_URI, ""), env.get(ENV_ATTEMPT, "")
    if not uri or not attempt.isdigit():
        return _NO_RECORD, False
    try:
        loc = parse_uri(uri)
    except ValueError as exc:
        raise LaunchRejected(f"azure launch: {exc}") from None
    n = int(attempt)
    doc = _DOC.format(attempt=n)
    if loc.is_local:
        exits = loc.file(exit_name(n)).parent
        return _RECORD_FILE.format(doc=doc, dir=shlex.quote(str(exits)), n=n), True
    url = f"s3://{loc.bucket}/{loc.key(exit_name(n))}"
    attempts = " ".join(str(i) for i in range(1, ttl.RECORD_ATTEMPTS + 1))
    delay = int(ttl.RECORD_RETRY_DELAY.total_seconds())
    return _RECORD_S3.format(doc=doc, url=shlex.quote(url), attempts=attempts, delay_s=delay), True


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
