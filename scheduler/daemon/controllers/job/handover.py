"""Placing a job again on an interruption notice, while its old instance still saves.

A single-node job that asks for it (`place_on_notice`) gets its next attempt placed the pass
its running attempt's notice is known (from the cloud, or from its trainer's progress.json),
by the same placement and budget checks as a recovery, away from the noticed pool; the old
attempt's burn is still in the budgets' figures, so both count while both run. The new
attempt names the one it replaces (`Attempt.replaces`) and its store claim waits
(`claim_pending`, launch/handover.py), so the old trainer's final save lands first. When the
old attempt ends it is settled on its own (`ends.AttemptEnds.write_replaced_ends`): counted
as an interruption once, the job left on its new attempt. Gangs keep the ordinary path.
"""

from __future__ import annotations

from datetime import datetime

from scheduler.core.states import AttemptState, JobState
from scheduler.daemon.checkpoints import StoreError
from scheduler.daemon.controllers.job import signals
from scheduler.daemon.controllers.job.snapshot import PassFacts, Snapshot
from scheduler.state.models import Attempt, Job


def attempt_number(attempt_id: str | None) -> int:
    """The number in an attempt id ("<job id>-a<N>"); 0 for none."""
    if not attempt_id or "-a" not in attempt_id:
        return 0
    tail = attempt_id.rsplit("-a", 1)[1]
    return int(tail) if tail.isdigit() else 0


def may_place_beside(
    job: Job,
    live: Attempt,
    snap: Snapshot,
    facts: PassFacts,
    now: datetime,
    max_preemptions: int | None = None,
) -> bool:
    """Whether the job's next attempt is placed now, beside its live one: a single-node job
    that asks for it, running on its only live attempt, which has a notice and was not asked
    to stop, with a spec that still validates, no back-off, and an interruption left to
    recover (`max_preemptions`: the job's, else the daemon's).

    One placement per notice: the live attempt must also be the job's newest. An attempt
    placed beside it that failed to launch is left unsettled while the noticed one runs (its
    end is acted on with the noticed one's, by the ordinary path); placing again would make
    an attempt every pass, none counted toward the job's failures or back-off."""
    if live.nodes != 1 or snap.live_count.get(job.id, 0) != 1:
        return False
    newest = snap.last.get(job.id)
    if newest is None or newest.id != live.id:
        return False  # an attempt was already placed beside this one (and has ended)
    if live.state is not AttemptState.RUNNING or live.stop_requested_at is not None:
        return False
    if job.state is not JobState.RUNNING or job.cancel_requested:
        return False
    if job.not_before is not None and job.not_before > now:
        return False
    if facts.spec_problem(job.spec_json) is not None:
        return False
    spec = facts.spec(job.spec_json)
    if not spec.place_on_notice or spec.nodes != 1:
        return False
    limit = spec.max_preemptions if spec.max_preemptions is not None else max_preemptions
    if limit is not None and job.recoveries + 1 > limit:
        return False  # this interruption fails the job: nothing to place
    try:
        progress = snap.progress.progress(job.id)
    except StoreError:
        progress = None
    return signals.notice_in(live, progress)
