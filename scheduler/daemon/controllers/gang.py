"""What the controllers share about an attempt's instances (its nodes): the AttemptInstance
rows, written in the caller's transaction, and the capacity a gang launch taught us.

A single-node attempt keeps its instance on the Attempt row too (node 0 mirrored here), so
every older code path reads it as before; a gang's nodes live only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic_core import PydanticUndefined
from sqlmodel import Session, col, select

from providers.base import (
    CapacityUnavailable,
    EndReason,
    FatalError,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderError,
    ResourceRef,
)
from scheduler.core.states import AttemptState
from scheduler.state.audit import emit
from scheduler.state.models import Attempt, AttemptInstance, PoolState


class GangShortfall(ProviderError):
    """A gang launch failed part-way: `cause` is the cloud's error, `found` what it had
    started under the token family (already asked to terminate when `cleaned`)."""

    def __init__(self, cause: ProviderError, found: Sequence[Instance], cleaned: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.found = list(found)
        self.cleaned = cleaned


def node_id(attempt_id: str, node: int, rnd: int = 0) -> str:
    """A node row's id: "<attempt id>-n<node>", and "-r<round>" for a replacement."""
    return f"{attempt_id}-n{node}" if rnd == 0 else f"{attempt_id}-n{node}-r{rnd}"


def current_rows(rows: Iterable[AttemptInstance]) -> list[AttemptInstance]:
    """Each node's latest row (its replacement, once a round replaced it), in node order:
    what the gang is now. The rows they superseded stay, billed, until they end."""
    best: dict[int, AttemptInstance] = {}
    for r in rows:
        if r.node not in best or r.round > best[r.node].round:
            best[r.node] = r
    return [best[k] for k in sorted(best)]


def nodes_of(s: Session, attempt_ids: Iterable[str]) -> dict[str, list[AttemptInstance]]:
    """The node rows of these attempts, by attempt, in node order (one query per 500)."""
    ids = list(dict.fromkeys(attempt_ids))
    out: dict[str, list[AttemptInstance]] = {i: [] for i in ids}
    for k in range(0, len(ids), 500):
        rows = s.exec(
            select(AttemptInstance)
            .where(col(AttemptInstance.attempt_id).in_(ids[k : k + 500]))
            .order_by(col(AttemptInstance.node), col(AttemptInstance.round))
        ).all()
        for r in rows:
            out[r.attempt_id].append(r)
    return out


def node_refs(rows: Iterable[AttemptInstance], live_only: bool = True) -> list[ResourceRef]:
    return [
        ResourceRef(r.instance_id, r.region, r.zone, r.instance_scope, r.started_at)
        for r in rows
        if r.instance_id and (not live_only or r.state is not AttemptState.ENDED)
    ]


def record_nodes(
    s: Session,
    a: Attempt,
    instances: Sequence[Instance],
    now: datetime,
    known: Sequence[AttemptInstance] | None = None,
) -> list[AttemptInstance]:
    """Upsert one row per instance the cloud reported for `a` (node from the instance),
    mirroring node 0 onto the Attempt; returns the attempt's rows in node order.

    `known`: the attempt's rows when the caller read a whole batch's at once (`nodes_of`),
    so recording a pass of launches is one query, not one per attempt."""
    if known is None:
        known = s.exec(select(AttemptInstance).where(AttemptInstance.attempt_id == a.id)).all()
    have = {r.node: r for r in current_rows(known)}
    for inst in instances:
        node = inst.node if a.nodes > 1 else 0
        row = have.get(node) or AttemptInstance(
            id=node_id(a.id, node), attempt_id=a.id, node=node, region=a.region, zone=a.zone
        )
        row.instance_id = inst.id
        row.instance_scope = inst.scope
        row.region = inst.region or row.region
        row.zone = inst.zone or row.zone
        observe_node(row, inst, now)
        s.add(row)
        have[node] = row
        if node == 0:
            a.instance_id, a.instance_scope = inst.id, inst.scope
            a.region = inst.region or a.region
    s.add(a)
    return [have[k] for k in sorted(have)]


def classified_rows(rows: Iterable[AttemptInstance]) -> list[AttemptInstance]:
    """The row that says how each node ended, for classifying the gang's end: its latest
    that ever ran (a replacement that never started leaves the word to the node it was to
    replace), else its first."""
    best: dict[int, AttemptInstance] = {}
    for r in rows:
        have = best.get(r.node)
        if have is None or (r.started_at is not None and r.round > have.round):
            best[r.node] = r
    return [best[k] for k in sorted(best)]


# Called in the InstanceController's transaction with the attempt, all its node rows and the
# current ones lost or noticed; True when the recovery took them over (replacing them).
GangLossHook = Callable[
    [Session, Attempt, list[AttemptInstance], list[AttemptInstance], datetime], bool
]


class NodeState(Protocol):
    """What `observe_node` reads and writes: an AttemptInstance, or `_Node` for a core row."""

    state: AttemptState
    started_at: datetime | None
    ended_at: datetime | None
    notice_at: datetime | None
    end_reason: str | None
    exit_code: int | None


@dataclass(slots=True)
class _Node:
    state: AttemptState
    started_at: datetime | None = None
    ended_at: datetime | None = None
    notice_at: datetime | None = None
    end_reason: str | None = None
    exit_code: int | None = None


def _defaults() -> dict[str, Any]:
    return {
        name: f.default
        for name, f in AttemptInstance.model_fields.items()
        if f.default is not PydanticUndefined
    }


NODE_DEFAULTS = _defaults()  # every column the ORM fills in when a row is constructed


def new_node_row(
    attempt_id: str, region: str, zone: str, inst: Instance, now: datetime
) -> dict[str, Any]:
    """The node-0 row `record_nodes` would add for a single-node attempt that has none, as a
    dict for one core INSERT of a whole pass's launches (an ORM object per row costs more
    than the rest of recording the launch). Same columns, same defaults, same observation."""
    node = _Node(NODE_DEFAULTS["state"])
    observe_node(node, inst, now)
    return {
        **NODE_DEFAULTS,
        "id": node_id(attempt_id, 0),
        "attempt_id": attempt_id,
        "node": 0,
        "instance_id": inst.id,
        "instance_scope": inst.scope,
        "region": inst.region or region,
        "zone": inst.zone or zone,
        "state": node.state,
        "started_at": node.started_at,
        "ended_at": node.ended_at,
        "notice_at": node.notice_at,
        "end_reason": node.end_reason,
        "exit_code": node.exit_code,
    }


def observe_node(row: NodeState, inst: Instance, now: datetime) -> None:
    """One node's row follows what the cloud says: billed from the cloud's launch time."""
    if row.state is AttemptState.ENDED:
        return
    if inst.state is InstanceState.RUNNING:
        row.state = AttemptState.RUNNING
        if row.started_at is None:
            row.started_at = min(inst.launched_at or now, now)
    if inst.notice_at is not None and row.notice_at is None:
        row.notice_at = inst.notice_at
    if inst.state in (InstanceState.ENDED, InstanceState.NOT_FOUND):
        row.state = AttemptState.ENDED
        row.ended_at = min(inst.ended_at or now, now)
        if row.started_at is None and inst.launched_at and inst.launched_at <= row.ended_at:
            row.started_at = inst.launched_at
        if row.started_at is not None and row.ended_at < row.started_at:
            row.ended_at = row.started_at
        reason = inst.end_reason if inst.state is InstanceState.ENDED else EndReason.UNKNOWN
        row.end_reason = (reason or EndReason.UNKNOWN).value
        row.exit_code = inst.exit_code


def request_limit_reason(provider: str, most: int) -> str:
    """Why a gang larger than `most` cannot go to `provider` (one request starts a gang)."""
    return f"{provider} launches at most {most} instance{'' if most == 1 else 's'} in one request"


def mark_gang_capacity(
    s: Session, pool: str, held: int, why: str, now: datetime, ttl: timedelta
) -> None:
    """A pool held `held` instances before a capacity error: gangs larger than that skip it
    for `ttl` (smaller gangs and single nodes still go there)."""
    ps = s.get(PoolState, pool) or PoolState(pool=pool)
    ps.gang_capacity = held
    ps.gang_capacity_until = now + ttl
    ps.gang_capacity_reason = why[:300]
    s.add(ps)
    emit(
        s,
        now,
        "pool_gang_capacity",
        f"{pool} takes at most {held} until {ps.gang_capacity_until:%H:%M:%S}Z: {why}",
    )


def launching_gang(request: LaunchRequest) -> Callable[[Provider], list[Instance]]:
    """A gang launch, all or nothing: when the cloud fails part-way (a capacity error on the
    third of four), whatever it started under the token family is terminated in the same
    call, and the error says what was found (GangShortfall)."""

    def call(p: Provider) -> list[Instance]:
        try:
            return p.launch(request)
        except (CapacityUnavailable, FatalError) as e:
            found: list[Instance] = []
            cleaned = False
            try:
                found = [
                    i
                    for i in p.find_by_token(request.token, request.offering.region)
                    if i.state is not InstanceState.NOT_FOUND
                ]
                live = [i.ref for i in found if i.live]
                if live:
                    p.terminate(live)
                cleaned = True
            except ProviderError:
                pass  # the attempt stays stopping: the StopController terminates by token
            raise GangShortfall(e, found, cleaned) from e

    return call
