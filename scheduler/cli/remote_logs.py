"""`spotwise logs` against an API server: the output files live on the daemon's host, so
they are read through the server a part at a time, and printed as `logs` prints files here
(the same headers, the same lines while following, the same notes for a cloud instance).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import typer

from scheduler.cli.common import print_err
from scheduler.cli.remote import Remote


def attempts_reader(api: Remote, job_id: str) -> Callable[[], dict[str, Any]]:
    """What `logs -f` reads between two reads of the output: the job and its attempts."""

    def read() -> dict[str, Any]:
        doc = api.job_detail(job_id)
        return {"job": doc["job"], "attempts": doc["attempts"]}

    return read


def _part(api: Remote, job_id: str, number: int, stream: str, offset: int) -> dict[str, Any]:
    return api.get(
        f"{api.job_path(job_id)}/logs", {"attempt": number, "stream": stream, "offset": offset}
    )


def print_whole(api: Remote, job_id: str, chosen: dict[str, Any], names: list[str]) -> None:
    where = chosen["logs"]
    if not where.get("available"):
        print_err(where["note"])
        if where.get("console_command"):
            print_err(f"console output: {where['console_command']}")
        raise typer.Exit(1)
    for name in names:
        path = where[name]
        if len(names) > 1:
            sys.stdout.write(f"==> {path.rsplit('/', 1)[-1]} <==\n")
        offset, exists = 0, False
        while True:
            part = _part(api, job_id, chosen["number"], name, offset)
            exists = exists or part["exists"]
            sys.stdout.write(part["text"])
            if part["next_offset"] == offset:
                break
            offset = part["next_offset"]
        if not exists:
            print_err(f"{path}: not written yet")


def tail_reader(api: Remote, job_id: str) -> Callable[..., None]:
    """`tail_until_ended` over the server: each stream from where the last read stopped,
    whole lines only, until the attempt has ended and nothing new is left."""

    def tail(
        attempt: dict[str, Any],
        names: list[str],
        running: Callable[[], bool],
        write: Callable[[str], None],
        *,
        interval: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        offsets = dict.fromkeys(names, 0)
        partial = dict.fromkeys(names, "")
        while True:
            alive = running()
            got = False
            for name in names:
                part = _part(api, job_id, attempt["number"], name, offsets[name])
                if not part["text"]:
                    continue
                got = True
                offsets[name] = part["next_offset"]
                *lines, partial[name] = (partial[name] + part["text"]).split("\n")
                for line in lines:
                    write(line)
            if not alive and not got:
                for name in names:
                    if partial[name]:
                        write(partial[name])
                return
            sleep(interval)

    return tail
