"""The boot-script lines that write a job's exit record into its checkpoint store.

Every cloud's boot script (AWS user data, GCP startup script, Azure custom data) runs the job
and, when `python3 -m trainer.outcome` is not on the image, writes `exits/<N>.json` itself:
with a temp file and a rename for a local path, with `aws s3 cp` (retried) for s3://. One
copy here, so the three scripts cannot drift from `trainer.contract`'s layout.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from providers.base import LaunchRejected
from trainer.contract import ENV_ATTEMPT, ENV_CHECKPOINT_URI, exit_name, parse_uri

# Runs the job and records how it ended, as a str.format template fragment every cloud's
# boot script splices in: it needs {argv} (quoted words), {outcome_ok} and {record} (the
# lines from record_lines), and $state / $logdir set before it.
RUN_AND_RECORD = """argv=( {argv} )
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
"""

# The record, as trainer.contract.exit_doc writes it; rc and the time are filled at run time.
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


def record_lines(
    env: Mapping[str, str], cloud: str, attempts: int, retry_delay_s: int
) -> tuple[str, bool]:
    """The script lines writing exits/<N>.json, and whether there is a record to write.
    The script defines `$rc` and `$logdir` before these lines run."""
    uri, attempt = env.get(ENV_CHECKPOINT_URI, ""), env.get(ENV_ATTEMPT, "")
    if not uri or not attempt.isdigit():
        return _NO_RECORD, False
    try:
        loc = parse_uri(uri)
    except ValueError as exc:
        raise LaunchRejected(f"{cloud} launch: {exc}") from None
    n = int(attempt)
    doc = _DOC.format(attempt=n)
    if loc.is_local:
        exits = loc.file(exit_name(n)).parent
        return _RECORD_FILE.format(doc=doc, dir=shlex.quote(str(exits)), n=n), True
    url = f"s3://{loc.bucket}/{loc.key(exit_name(n))}"
    tries = " ".join(str(i) for i in range(1, attempts + 1))
    return _RECORD_S3.format(doc=doc, url=shlex.quote(url), attempts=tries,
                             delay_s=retry_delay_s), True  # fmt: skip
