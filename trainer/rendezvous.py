"""Rendezvous rounds of a gang, through the checkpoint store: a lost node replaced, the others
kept, every rank restarting from the last checkpoint in a new process group.

Stdlib only: the scheduler writes the round and the node wrappers (``trainer.launch``) read
it, so both sides share this one layout under the job's checkpoint URI::

    gang/a<N>/round.json         the scheduler's word: {"attempt", "round", "nnodes",
                                 "replaced": [node ranks], "at"}; written when it decides to
                                 replace nodes of attempt N
    gang/a<N>/r<R>/node-<K>.json node K has arrived for round R: {"node", "endpoint", "at"}
                                 (node 0's carries "host:port" of its own static rendezvous)

A node's wrapper whose torchrun stopped without a signal of its own (the others' common
checkpoint after a node got the notice, or a collective that failed because a node vanished)
waits up to ``$SPOTWISE_RDZV_WAIT_S`` for a newer round. In it, every rank keeps its node rank
(global rank = node rank x G + local rank, as in round 0, so the resume is exact); node 0
publishes its endpoint, each node waits until all N have arrived, and torchrun starts again
with the rendezvous id ``<id>-r<R>``. A node listed as replaced leaves. A newer round seen
while waiting wins; a wait that runs out ends the node with 75, and the scheduler re-places
the gang whole. Round 0 is the gang as launched, its endpoint given at launch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from trainer.contract import utc_now

ENV_RDZV_ROUND = "SPOTWISE_RDZV_ROUND"  # the round a node launched into (0: the gang's first)
# Seconds a node waits for a newer round once its torchrun stopped without a signal (0 or
# unset: it never waits, and its exit ends the node as before).
ENV_RDZV_WAIT_S = "SPOTWISE_RDZV_WAIT_S"
# A torchrun that failed (rather than exiting 75 after the common checkpoint) waits at most
# this long: a vanished peer is seen by the scheduler within a few passes, and a job's own
# crash should not hold its nodes for the whole wait.
FAILURE_WAIT_S = 180.0
POLL_S = 1.0


def round_name(attempt: int) -> str:
    return f"gang/a{attempt}/round.json"


def arrival_name(attempt: int, rnd: int, node: int) -> str:
    return f"gang/a{attempt}/r{rnd}/node-{node}.json"


def rdzv_id(base: str, rnd: int) -> str:
    """The torchrun rendezvous id of round `rnd` (round 0 keeps the attempt's own)."""
    return base if rnd == 0 else f"{base}-r{rnd}"


@dataclass(frozen=True, slots=True)
class Round:
    attempt: int
    round: int
    nnodes: int
    replaced: tuple[int, ...]


def round_doc(attempt: int, rnd: int, nnodes: int, replaced: list[int]) -> str:
    return (
        json.dumps(
            {
                "attempt": attempt,
                "round": rnd,
                "nnodes": nnodes,
                "replaced": sorted(replaced),
                "at": utc_now(),
            }
        )
        + "\n"
    )


def parse_round(text: str | None) -> Round | None:
    """The scheduler's round record, or None when absent or unusable."""
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return Round(
            int(doc["attempt"]),
            int(doc["round"]),
            int(doc["nnodes"]),
            tuple(int(k) for k in doc.get("replaced") or ()),
        )
    except (KeyError, TypeError, ValueError):
        return None


class TextStore(Protocol):
    """What the rounds need of a checkpoint store (trainer.storage.Store fits)."""

    def read_text(self, name: str) -> str | None: ...
    def write_text(self, name: str, text: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Node:
    """This node, as its wrapper knows it from the environment."""

    attempt: int
    node: int
    nnodes: int
    endpoint: str  # its own address for node 0; what it was launched with otherwise


def next_round(
    store: TextStore,
    me: Node,
    after: int,
    wait_s: float,
    stop: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Round | None:
    """The first round newer than `after` for this attempt, within `wait_s` (None: none came,
    or `stop` said to give up: a signal of this node's own)."""
    deadline = clock() + wait_s
    while True:
        r = parse_round(store.read_text(round_name(me.attempt)))
        if r is not None and r.attempt == me.attempt and r.round > after:
            return r
        if stop() or clock() >= deadline:
            return None
        sleep(POLL_S)


def join(
    store: TextStore,
    me: Node,
    rnd: int,
    wait_s: float,
    stop: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, str] | None:
    """Arrive for round `rnd` and wait for every node: (round, node 0's endpoint). A newer
    round decided meanwhile is joined instead; None when this node was replaced, the wait
    ran out or `stop` said to give up."""
    deadline = clock() + wait_s
    while True:
        doc = {"node": me.node, "endpoint": me.endpoint if me.node == 0 else "", "at": utc_now()}
        store.write_text(arrival_name(me.attempt, rnd, me.node), json.dumps(doc) + "\n")
        while True:
            newer = parse_round(store.read_text(round_name(me.attempt)))
            if newer is not None and newer.attempt == me.attempt and newer.round > rnd:
                if me.node in newer.replaced:
                    return None
                rnd = newer.round
                break  # arrive again, for the newer round
            arrived = _arrivals(store, me, rnd)
            if len(arrived) >= me.nnodes and arrived.get(0):
                return rnd, arrived[0]
            if stop() or clock() >= deadline:
                return None
            sleep(POLL_S)


def _arrivals(store: TextStore, me: Node, rnd: int) -> dict[int, str]:
    """node -> endpoint it published (node 0's is the rendezvous), for the nodes arrived."""
    out: dict[int, str] = {}
    for k in range(me.nnodes):
        text = store.read_text(arrival_name(me.attempt, rnd, k))
        if text is None:
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out[k] = str(doc.get("endpoint") or "")
    return out


def wait_seconds(env: Mapping[str, str]) -> float:
    raw = env.get(ENV_RDZV_WAIT_S, "")
    try:
        return max(0.0, float(raw)) if raw else 0.0
    except ValueError:
        return 0.0


def launched_round(env: Mapping[str, str]) -> int:
    raw = env.get(ENV_RDZV_ROUND, "")
    return int(raw) if raw.isdigit() else 0
