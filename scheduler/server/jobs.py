"""The API's job routes: status, show, submit, cancel, release, requeue, logs, events.

Each answers with the document the command prints with `-o json` (one schema, one version
field), limited to the jobs the caller may see: a job of another team is answered as one
that does not exist (404), so ids and names of other teams' jobs are not learned by trying.
Writes are the CLI's own desired-state writes, with the caller's user name as who asked.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from starlette.requests import Request

from scheduler.core.errors import UserError
from scheduler.server.auth import ApiError
from scheduler.server.common import (
    MAX_PAGE,
    PAGE_SIZE,
    context,
    json_response,
    principal,
    since_time,
    states_of,
    user_error,
    visible,
)
from scheduler.state.accounts import Principal

router = APIRouter(prefix="/api/v1", tags=["jobs"])
Caller = Annotated[Principal, Depends(principal)]
Ref = Annotated[str, "a job id, id prefix or name"]
MAX_LOG_CHUNK = 1 << 20


@router.get("/whoami", summary="Who the token stands for, and the daemon's clock")
def whoami(request: Request, p: Caller) -> Any:
    from scheduler.state.read_models import document

    clock = context(request).clock()
    anchor = getattr(clock, "anchor", None)
    return json_response(
        document(
            user=p.name,
            role=p.role,
            teams=list(p.teams),
            token=f"swt_{p.token_id}",
            clock={"speedup": float(getattr(clock, "speedup", 1.0) or 1.0), "anchor": anchor},
        )
    )


@router.get("/daemon", summary="The daemon keeping the database, and the stale-daemon warning")
def daemon(request: Request, p: Caller) -> Any:
    from scheduler.state import read_models
    from scheduler.state.liveness import daemon_warning

    ctx = context(request)
    lease = read_models.daemon_heartbeat(ctx.db)
    warning = daemon_warning(ctx.read_settings(), lease)
    return json_response(read_models.document(daemon=lease, daemon_warning=warning))


@router.get("/jobs", summary="status: one row per job, active and newest first")
def jobs(
    request: Request,
    p: Caller,
    state: Annotated[list[str] | None, Query(description="state (repeatable, or a,b)")] = None,
    team: Annotated[str | None, Query(max_length=64)] = None,
    user: Annotated[str | None, Query(max_length=64, description="who submitted")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE_SIZE,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Any:
    """The `status -o json` document, a page of `limit` jobs from `offset`; the whole
    count is in X-Total-Count and the next page in a Link header (rel="next")."""
    from urllib.parse import urlencode

    from scheduler.state import read_models
    from scheduler.state.liveness import daemon_warning

    ctx = context(request)
    states = states_of(state)
    rows = read_models.job_rows(ctx.db, states=states, team=team, iso_times=True, teams=visible(p))
    if user:
        rows = [r for r in rows if r["submitted_by"] == user]
    total = len(rows)
    lease = read_models.daemon_heartbeat(ctx.db)
    doc = read_models.document(
        jobs=rows[offset : offset + limit],
        daemon_warning=daemon_warning(ctx.read_settings(), lease),
        daemon=lease,
    )
    headers = {"X-Total-Count": str(total)}
    if offset + limit < total:
        # Relative (RFC 8288): never built from the request's Host header.
        query = [(k, v) for k, v in request.query_params.multi_items() if k != "offset"]
        query.append(("offset", str(offset + limit)))
        headers["Link"] = f'</api/v1/jobs?{urlencode(query)}>; rel="next"'
    return json_response(doc, headers=headers)


def _find(request: Request, p: Principal, ref: str) -> dict[str, Any]:
    """The job `ref` names among those `p` may see (its `show` document)."""
    from scheduler.state import read_models

    ctx = context(request)
    if len(ref) > 200:
        raise ApiError(400, "a job reference is an id, an id prefix or a name (at most 200)")
    try:
        return read_models.job_detail(ctx.db, ref, ctx.read_settings(), teams=visible(p))
    except UserError as e:
        raise user_error(e) from None


@router.get("/jobs/{ref}", summary="show: one job, its spec, attempts and events")
def show(request: Request, ref: Ref, p: Caller) -> Any:
    from scheduler.state.read_models import document

    doc = _find(request, p, ref)
    spec = doc.get("spec")
    if spec is not None:
        spec["env_visible"] = p.sees_env_of(doc["job"]["team"])
        if not spec["env_visible"]:
            spec["env"] = dict.fromkeys(spec.get("env") or {}, "***")
    return json_response(document(**doc))


class JobFile(BaseModel):
    """A job file as the CLI read it: its name (for messages) and its TOML text."""

    file: str = Field(default="<job>", max_length=4096)
    text: str = Field(max_length=1 << 20)


@router.post("/jobs", status_code=201, summary="submit: validate and enqueue a job file")
def submit(request: Request, body: JobFile, p: Caller) -> Any:
    from scheduler.core.config import check_team
    from scheduler.core.errors import key_lines, parse_toml
    from scheduler.core.jobspec import jobspec_from_dict
    from scheduler.state.desired import submit as submit_job
    from scheduler.state.read_models import document

    ctx = context(request)
    cfg = ctx.config()
    now = ctx.now()
    try:
        data = parse_toml(body.text, body.file)
        spec = jobspec_from_dict(data, source=body.file, lines=key_lines(body.text))
        spec.validate_for_submit(now, source=body.file)
        check_team(spec, cfg, source=body.file)
    except UserError as e:
        raise ApiError(400, str(e)) from None
    if p.role == "viewer":
        raise ApiError(403, f"{p.name} is a viewer: viewers read, they cannot submit")
    if not p.acts_on(spec.team):
        mine = ", ".join(p.teams) or "none"
        raise ApiError(
            403,
            f"{body.file}: team: {spec.team!r} is not one of {p.name}'s teams ({mine}): "
            "set team = ... to one of them",
        )
    job = submit_job(ctx.engine, spec, now, cfg.daemon.resolved_checkpoint_root(), p.name)
    return json_response(document(id=job.id, name=job.name, state=job.state.value), status=201)


def _act(request: Request, p: Principal, ref: str, what: str) -> Any:
    from scheduler.state.desired import cancel
    from scheduler.state.read_models import document
    from scheduler.state.requeue import release, requeue

    doc = _find(request, p, ref)
    job = doc["job"]
    if not p.acts_on(job["team"]):
        role = "a viewer" if p.role == "viewer" else "not a member of that team"
        raise ApiError(403, f"{p.name} cannot {what} job {job['id']}: {role}")
    ctx = context(request)
    act = {"cancel": cancel, "release": release, "requeue": requeue}[what]
    try:
        j = act(ctx.engine, job["id"], ctx.now(), p.name)
    except UserError as e:
        raise user_error(e) from None
    return json_response(document(id=j.id, name=j.name, state=j.state.value))


@router.post("/jobs/{ref}/cancel", summary="cancel: instances checkpoint and stop")
def cancel(request: Request, ref: Ref, p: Caller) -> Any:
    return _act(request, p, ref, "cancel")


@router.post("/jobs/{ref}/release", summary="release: a HELD job back to the queue")
def release(request: Request, ref: Ref, p: Caller) -> Any:
    return _act(request, p, ref, "release")


@router.post("/jobs/{ref}/requeue", summary="requeue: a FAILED job again, counters reset")
def requeue(request: Request, ref: Ref, p: Caller) -> Any:
    return _act(request, p, ref, "requeue")


@router.get("/jobs/{ref}/logs", summary="logs: a part of one stream of an attempt's output")
def logs(
    request: Request,
    ref: Ref,
    p: Caller,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    stream: Annotated[str, Query(pattern="^(stdout|stderr)$")] = "stdout",
    offset: Annotated[int, Query(ge=0)] = 0,
    max_bytes: Annotated[int, Query(ge=1, le=MAX_LOG_CHUNK)] = MAX_LOG_CHUNK,
) -> Any:
    """From byte `offset` of the attempt's `stream` (the latest attempt by default): the
    text, where the next read starts, and the attempt's state. A cloud instance's output
    is not here: `available` is false and `note` says where it is."""
    from pathlib import Path

    from scheduler.state.read_models import document

    doc = _find(request, p, ref)
    attempts = doc["attempts"]
    job_id = doc["job"]["id"]
    if not attempts:
        raise ApiError(404, f"job {job_id} has no attempts yet: it has not been placed")
    chosen = (
        attempts[-1]
        if attempt is None
        else next((a for a in attempts if a["number"] == attempt), None)
    )
    if chosen is None:
        have = ", ".join(str(a["number"]) for a in attempts)
        raise ApiError(404, f"job {job_id} has no attempt {attempt} (attempts: {have})")
    where = chosen["logs"]
    out: dict[str, Any] = {
        "job_id": job_id,
        "attempt": chosen["number"],
        "attempt_state": chosen["state"],
        "available": bool(where.get("available")),
        "note": where.get("note"),
        "console_command": where.get("console_command"),
        "stream": stream,
        "path": where.get(stream),
        "exists": False,
        "offset": offset,
        "next_offset": offset,
        "text": "",
    }
    if where.get("available"):
        path = Path(where[stream])
        try:
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read(max_bytes)
            out |= {
                "exists": True,
                "next_offset": offset + len(data),
                "text": data.decode(errors="replace"),
            }
        except OSError:
            pass
    return json_response(document(**out))


@router.get("/events", summary="events: the audit log, who asked")
def events(
    request: Request,
    p: Caller,
    job: Annotated[str | None, Query(max_length=200)] = None,
    kind: Annotated[list[str] | None, Query()] = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    user: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 50,
    after_id: Annotated[int | None, Query(ge=0)] = None,
) -> Any:
    from scheduler.state import read_models

    ctx = context(request)
    start = since_time(since, ctx.now())
    kinds = [x.strip() for k in kind or [] for x in k.split(",") if x.strip()] or None
    try:
        rows = read_models.event_rows(
            ctx.db, job, limit, since=start, kinds=kinds, actor=user, after_id=after_id,
            teams=visible(p),
        )  # fmt: skip
    except UserError as e:
        raise user_error(e) from None
    return json_response(read_models.document(events=rows))


@router.get("/pools", summary="the local market's pools each job ran in")
def pools(request: Request, p: Caller, job: Annotated[list[str] | None, Query()] = None) -> Any:
    """job id -> the pools its local-market attempts ran in (what `events` and `show`
    mark as the local market's), for the jobs the caller may see."""
    from scheduler.state import read_models
    from scheduler.state.read_connection import placeholders, reading

    ctx = context(request)
    ids = sorted(set(job or []))[:1000]
    teams = visible(p)
    if ids and teams is not None:
        with reading(ctx.db) as query:
            rows = query(f"SELECT id, team FROM job WHERE id IN ({placeholders(ids)})", ids)
        ids = [i for i, team in rows if team in teams]
    found = read_models.local_pools(ctx.db, ids)
    return json_response(read_models.document(pools={k: sorted(v) for k, v in found.items()}))
