"""`spotwise logs`: a job's stdout and stderr, as files this machine can read (the local
market's) or, for a cloud instance, where the wrapper left them and how to get the console.

`--follow` follows the job, not one attempt (as `sky jobs logs` follows a managed job
across its recoveries): it prints as the files grow (tail -f over both), and when the
attempt ends and the job goes on elsewhere, a separator line says how the attempt ended and
where the next one runs, and the next attempt's output follows. It stops when the job is
finished: exit 0 when it SUCCEEDED, 1 when it FAILED or was CANCELLED.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from scheduler.cli.common import ConfigOpt, complete_jobs, open_reads, pool_label, print_err

commands = typer.Typer()

POLL_SECONDS = 0.5


class Stream(StrEnum):
    both = "both"
    stdout = "stdout"
    stderr = "stderr"


@commands.command()
def logs(
    job: Annotated[
        str,
        typer.Argument(
            metavar="JOB", help="Job id, id prefix or name", autocompletion=complete_jobs
        ),
    ],
    attempt: Annotated[
        int | None,
        typer.Option("--attempt", "-a", metavar="N", help="Attempt number (default: latest)"),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing, across attempts, until the job finishes"
        ),
    ] = False,
    stream: Annotated[Stream, typer.Option(help="both, stdout or stderr")] = Stream.both,
    config: ConfigOpt = None,
) -> None:
    """A job's stdout and stderr (the local market's files; for clouds, where they are)."""
    from scheduler.cli.remote import target
    from scheduler.core.errors import UserError
    from scheduler.state import read_models

    api = target()
    tail_attempt = None
    if api is not None:
        from scheduler.cli.remote_logs import attempts_reader, print_whole, tail_reader

        doc = api.job_detail(job)
        read = attempts_reader(api, doc["job"]["id"])
        tail_attempt = tail_reader(api, doc["job"]["id"])
    else:
        cfg, db = open_reads(config)
        doc = read_models.job_detail(db, job, cfg)

        def read() -> dict[str, Any]:
            return read_models.job_attempts(db, doc["job"]["id"], cfg)

    attempts = doc["attempts"]
    job_id = doc["job"]["id"]
    names = ["stdout", "stderr"] if stream is Stream.both else [stream.value]
    if not attempts and not follow:
        raise UserError(f"job {job_id} has no attempts yet: it has not been placed")
    chosen = (
        (attempts[-1] if attempts else None)
        if attempt is None
        else next((a for a in attempts if a["number"] == attempt), None)
    )
    if attempts and chosen is None:
        have = ", ".join(str(a["number"]) for a in attempts)
        raise UserError(f"job {job_id} has no attempt {attempt} (attempts: {have})")
    if not follow:
        assert chosen is not None
        if api is not None:
            print_whole(api, job_id, chosen, names)
        else:
            _print_whole(chosen, names)
        return

    def write(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    code = 0
    with contextlib.suppress(KeyboardInterrupt):
        code = follow_job(
            read, chosen["number"] if chosen else None, names, write, tail_attempt=tail_attempt
        )
    raise typer.Exit(code)


def _print_whole(chosen: dict[str, Any], names: list[str]) -> None:
    where = chosen["logs"]
    if not where.get("available"):
        print_err(where["note"])
        if where.get("console_command"):
            print_err(f"console output: {where['console_command']}")
        raise typer.Exit(1)
    paths = [Path(where[n]) for n in names]
    for p in paths:
        if len(paths) > 1:
            sys.stdout.write(f"==> {p.name} <==\n")
        try:
            sys.stdout.write(p.read_text(errors="replace"))
        except OSError:
            print_err(f"{p}: not written yet")


_FINISHED = {"SUCCEEDED": 0, "FAILED": 1, "CANCELLED": 1}


def follow_job(
    read: Callable[[], dict[str, Any]],
    number: int | None,
    names: list[str],
    write: Callable[[str], None],
    *,
    interval: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    tail_attempt: Callable[..., None] | None = None,
) -> int:
    """Follow a job from attempt `number` (None: its first) to its end: each attempt's
    output while it runs, a separator when it ends and the next one starts. Returns the exit
    code for the job's end (0 SUCCEEDED, 1 FAILED or CANCELLED). `tail_attempt` reads an
    attempt's output elsewhere than from files here (an API server's, cli/remote_logs.py)."""
    said_waiting = ""
    while True:
        doc = read()
        attempts = {a["number"]: a for a in doc["attempts"]}
        current = attempts.get(number) if number is not None else None
        if current is None:
            newer = sorted(n for n in attempts if number is None or n > number)
            if newer:
                number = newer[0]
                continue
            state, reason = doc["job"]["state"], doc["job"]["reason"]
            if state in _FINISHED:
                write(f"==> job {state}: {reason} <==")
                return _FINISHED[state]
            waiting = f"==> job {state}: {reason} <=="
            if waiting != said_waiting:
                write(waiting)
                said_waiting = waiting
            sleep(interval)
            continue
        said_waiting = ""
        where = current["logs"]
        if where.get("available"):
            paths = [Path(where[n]) for n in names]
            attempt_id = current["id"]

            def running(aid: str = attempt_id) -> bool:
                return any(a["id"] == aid and a["state"] != "ENDED" for a in read()["attempts"])

            if tail_attempt is not None:
                tail_attempt(current, names, running, write, interval=interval, sleep=sleep)
            else:
                tail_until_ended(paths, running, write, interval=interval, sleep=sleep)
        else:
            write(f"==> attempt {current['number']}: {where['note']} <==")
            while any(
                a["id"] == current["id"] and a["state"] != "ENDED" for a in read()["attempts"]
            ):
                sleep(interval)
        ended = next(a for a in read()["attempts"] if a["id"] == current["id"])
        write(f"==> {_ended_line(ended)} <==")
        number = current["number"] + 1
        attempts_now = {a["number"]: a for a in read()["attempts"]}
        nxt = attempts_now.get(number)
        if nxt is not None:
            write(f"==> {_started_line(nxt)} <==")
        else:
            # The next attempt is not written yet: wait for it, or for the job's end.
            while True:
                doc = read()
                found = {a["number"]: a for a in doc["attempts"]}.get(number)
                if found is not None:
                    write(f"==> {_started_line(found)} <==")
                    break
                state = doc["job"]["state"]
                if state in _FINISHED:
                    write(f"==> job {state}: {doc['job']['reason']} <==")
                    return _FINISHED[state]
                waiting = f"==> job {state}: {doc['job']['reason']} <=="
                if waiting != said_waiting:
                    write(waiting)
                    said_waiting = waiting
                sleep(interval)


def _ended_line(a: dict[str, Any]) -> str:
    from scheduler.cli.show import attempt_reason

    return f"attempt {a['number']} on {pool_label(a['provider'], a['pool'])} ended: " + (
        attempt_reason(a)
    )


def _started_line(a: dict[str, Any]) -> str:
    return (
        f"attempt {a['number']} on {pool_label(a['provider'], a['pool'])} "
        f"({a['market']}, ${a['price_per_hour']:.2f}/h)"
    )


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
