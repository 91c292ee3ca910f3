"""`spotwise logs`: a job's stdout and stderr, as files this machine can read (the local
market's) or, for a cloud instance, where the wrapper left them and how to get the console.

`--follow` keeps printing as the files grow (tail -f over both) until the attempt ends,
which it asks the read models (`attempt_running`) between reads.
"""

from __future__ import annotations

import contextlib
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler.cli.common import ConfigOpt, open_reads, print_err

commands = typer.Typer()


class Stream(StrEnum):
    both = "both"
    stdout = "stdout"
    stderr = "stderr"


@commands.command()
def logs(
    job: Annotated[str, typer.Argument(help="Job id, id prefix or name")],
    attempt: Annotated[
        int | None, typer.Option("--attempt", "-a", help="Attempt number (default: latest)")
    ] = None,
    until_ended: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the attempt ends")
    ] = False,
    stream: Annotated[Stream, typer.Option(help="both, stdout or stderr")] = Stream.both,
    config: ConfigOpt = None,
) -> None:
    """A job's stdout and stderr (the local market's files; for clouds, where they are)."""
    from scheduler.core.errors import UserError
    from scheduler.state import read_models

    cfg, db = open_reads(config)
    doc = read_models.job_detail(db, job, cfg)
    attempts = doc["attempts"]
    if not attempts:
        raise UserError(f"job {doc['job']['id']} has no attempts yet: it has not been placed")
    chosen = (
        attempts[-1]
        if attempt is None
        else next((a for a in attempts if a["number"] == attempt), None)
    )
    if chosen is None:
        have = ", ".join(str(a["number"]) for a in attempts)
        raise UserError(f"job {doc['job']['id']} has no attempt {attempt} (attempts: {have})")
    where = chosen["logs"]
    if not where.get("available"):
        print_err(where["note"])
        if where.get("console_command"):
            print_err(f"console output: {where['console_command']}")
        raise typer.Exit(1)
    names = ["stdout", "stderr"] if stream is Stream.both else [stream.value]
    paths = [Path(where[n]) for n in names]

    def write(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    if not until_ended:
        for p in paths:
            if len(paths) > 1:
                write(f"==> {p.name} <==")
            try:
                sys.stdout.write(p.read_text(errors="replace"))
            except OSError:
                print_err(f"{p}: not written yet")
        return
    attempt_id = chosen["id"]
    with contextlib.suppress(KeyboardInterrupt):
        tail_until_ended(paths, lambda: read_models.attempt_running(db, attempt_id), write)


def tail_until_ended(
    paths: list[Path],
    running: Any,
    write: Any,
    *,
    interval: float = 0.5,
    sleep: Any = time.sleep,
) -> None:
    """tail -f over several files until `running()` is false and nothing new is left: a
    file that does not exist yet is waited for, a line is written whole."""
    offsets = dict.fromkeys(paths, 0)
    partial = dict.fromkeys(paths, "")
    while True:
        alive = running()
        got = False
        for p in paths:
            try:
                with p.open("rb") as f:
                    f.seek(offsets[p])
                    data = f.read()
                    offsets[p] = f.tell()
            except OSError:
                continue
            if data:
                got = True
                text = partial[p] + data.decode(errors="replace")
                *lines, partial[p] = text.split("\n")
                for line in lines:
                    write(line)
        if not alive and not got:
            for p in paths:
                if partial[p]:
                    write(partial[p])
            return
        sleep(interval)
