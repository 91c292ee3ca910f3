"""Listing local instances (Listing): by owner tag, by launch token, and pruning the ended.

Listings walk only the `live/` markers, so thousands of ended instances cost nothing; pruning
reads only the ended index, and re-checks each candidate under its lock.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta
from pathlib import Path

from providers.base import (
    TAG_OWNER,
    Instance,
    LaunchRequest,
    ResourceRef,
    TaggedResource,
)
from providers.local import state
from providers.local.core import (
    INSTANCE_ID,
    age_s,
    instance_id_for,
    parse_time,
    remove_tree,
    unlock,
)
from providers.local.observation import Observation


class Listing(Observation):
    """list_tagged(), find_by_token() and prune()."""

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        """Live instances carrying spotwise-owner=owner. Ended ones are gone, as a cloud's
        terminated instances are; only the live markers are walked, never the history."""
        out = []
        for iid in self._live_ids():
            inst = self._view_safely(ResourceRef(iid))
            if inst.live and inst.tags.get(TAG_OWNER) == owner:
                created = parse_time((self._spec(iid) or {}).get("created_at"))
                out.append(TaggedResource(inst.ref, dict(inst.tags), True, created))
        return out

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        """The instance of a single-node token, or the nodes of a gang's token family."""
        found = []
        if self._locate(instance_id_for(token)) is not None:
            found.append(self._view_safely(ResourceRef(instance_id_for(token))))
        else:
            for node in range(self.capabilities.max_count):
                iid = instance_id_for(LaunchRequest.node_token(_Family(token), node))  # type: ignore[arg-type]
                if self._locate(iid) is None:
                    break
                found.append(self._view_safely(ResourceRef(iid)))
        return [i for i in found if not region or not i.region or i.region == region]

    def prune(self, older_than: timedelta) -> int:
        """Delete the directories (logs included) of instances that ended more than
        `older_than` ago (real time); returns how many. Reads only the ended index (no spec),
        and re-checks each candidate under its lock (ended, no live marker, unsupervised), so
        a live instance is never removed."""
        index = self.state_dir / state.ENDED_INDEX
        cutoff = time.time() - older_than.total_seconds()
        removed = 0
        for line in state.read_lines(index):
            parts = line.split()
            if len(parts) != 2 or not INSTANCE_ID.fullmatch(parts[1]):
                continue
            try:
                old = float(parts[0]) < cutoff
            except ValueError:
                continue
            d = self.instances_dir / parts[1]
            if old and d.is_dir() and self._remove_ended(d):
                removed += 1
                self._spec_cache.pop(parts[1], None)
        if removed:
            try:  # drop the entries whose directory is gone (and malformed ones)
                state.rewrite_lines(
                    index,
                    lambda ln: (
                        len(p := ln.split()) == 2
                        and INSTANCE_ID.fullmatch(p[1]) is not None
                        and (self.instances_dir / p[1]).is_dir()
                    ),
                )
            except OSError as e:
                self._warn("prune", f"cannot rewrite {index}: {e}")
        for left in self.instances_dir.glob(".t*-*"):  # launches that died before the claim,
            if left.name.startswith(".trash-") or age_s(left) > 3600:  # prunes interrupted
                remove_tree(left)
        return removed

    def _remove_ended(self, d: Path) -> bool:
        """Remove one ended, unsupervised instance; renamed away first so a concurrent
        describe sees it whole or NOT_FOUND, never half deleted (and never ends it again)."""
        try:
            lock = state.try_lock(d / state.LOCK)
        except OSError:
            return False
        if lock is None:
            return False
        try:
            if not (d / state.END).exists() or (self.live_dir / d.name).exists():
                return False
            trash = self.instances_dir / f".trash-{d.name}-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(d, trash)
            except OSError:
                return False
        finally:
            unlock(lock)
        remove_tree(trash)
        return True


class _Family:
    """A gang's token family, for LaunchRequest.node_token (one definition of node tokens)."""

    count = 2

    def __init__(self, token: str) -> None:
        self.token = token
