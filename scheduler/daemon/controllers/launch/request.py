"""What a launch asks the cloud for: the offering, the command, the environment, the tags.

One request per attempt, with the attempt's deterministic token, the tags every cloud
stores (`spotwise-job`, `spotwise-attempt`, `spotwise-owner`, `spotwise-install` (this
database's install id), the node for a single instance), the trainer's contract variables
(job, attempt, checkpoint URI, cloud, nodes, a gang's rendezvous id and how long its nodes
wait for a replacement's round) and the checkpoint store's endpoint. The requests of one
launch pass share a memo: thousands of jobs are often submitted from one spec, into a few
pools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from providers.base import (
    TAG_ATTEMPT,
    TAG_INSTALL,
    TAG_JOB,
    TAG_NODE,
    TAG_OWNER,
    Capabilities,
    LaunchRequest,
    Market,
    Offering,
    Provider,
)
from scheduler.core.config import Config
from scheduler.core.jobspec import JobSpec, load_stored
from scheduler.daemon.checkpoints import CheckpointStores
from scheduler.daemon.controllers.base import CatalogHolder
from scheduler.state.models import Job
from trainer import contract, rendezvous


@dataclass(frozen=True, slots=True)
class JobView:
    """What launching needs of an attempt's job."""

    id: str
    spec_json: str
    checkpoint_uri: str


@dataclass(slots=True)
class RequestMemo:
    """What the requests of one launch call share: offerings by pool, parsed specs by their
    JSON (many jobs are submitted from one spec), the owner tag as each cloud stores it."""

    offers: dict[str, Offering | None] = field(default_factory=dict)
    specs: dict[str, JobSpec] = field(default_factory=dict)
    owners: dict[int, str] = field(default_factory=dict)

    def owner_label(self, caps: Capabilities, owner: str) -> str:
        label = self.owners.get(id(caps))
        if label is None:
            label = self.owners[id(caps)] = caps.label(owner)
        return label


def gang_wrapper_wait(cfg: Config) -> int:
    """Seconds a gang node's wrapper waits for the next rendezvous round after its torchrun
    stopped without a signal (trainer.rendezvous): the replacement's wait bound and the time
    the daemon takes to stop a gang; 0 when gangs are always re-placed whole."""
    if cfg.gangs.recovery.value == "whole":
        return 0
    return int((cfg.gangs.replace_wait + cfg.daemon.stop_grace).total_seconds())


class LaunchRequests:
    def __init__(
        self,
        stores: CheckpointStores,
        catalog: CatalogHolder,
        config: Callable[[], Config],
        install_id: str = "",
    ) -> None:
        self.stores = stores
        self.catalog = catalog
        self._config = config
        self.install_id = install_id  # the database's (state.installation)

    def build(
        self,
        job: JobView | Job,
        a: Any,
        provider: Provider,
        memo: RequestMemo | None = None,
        claim_wait_s: float | None = None,
    ) -> LaunchRequest:
        """The launch request for attempt `a` (an Attempt or a row of its columns);
        StoredSpecInvalid when the job's stored spec no longer validates. `claim_wait_s`:
        the store is handed to it later (placed on a notice); its trainer waits this long."""
        memo = RequestMemo() if memo is None else memo
        spec = memo.specs.get(job.spec_json)
        if spec is None:
            spec = memo.specs[job.spec_json] = load_stored(job.spec_json)
        if a.pool not in memo.offers:
            memo.offers[a.pool] = self.catalog.catalog.offering_for_pool(a.pool)
        o = memo.offers[a.pool] or Offering(
            a.cloud,
            a.region,
            a.zone,
            a.instance_type,
            "",
            a.gpu_count,
            0,
            0,
            0,
            Market(a.market),
            a.price_per_hour,
            a.created_at,
        )
        # The store's endpoint first: a job's own env may point its instances elsewhere.
        env = {**self.stores.instance_env(job.checkpoint_uri), **spec.env}
        env.update(
            {
                contract.ENV_JOB_ID: job.id,
                contract.ENV_ATTEMPT: str(a.number),
                contract.ENV_CHECKPOINT_URI: job.checkpoint_uri,
                contract.ENV_CLOUD: a.cloud,
                contract.ENV_NNODES: str(a.nodes),
            }
        )
        # The job's checkpoint interval, which the bundled trainer honours: the job file's,
        # or for "auto" the first one placement chose (then the store's document).
        if isinstance(spec.checkpoint_interval, timedelta):
            env[contract.ENV_CHECKPOINT_INTERVAL] = f"{spec.checkpoint_interval.total_seconds():g}"
        elif first := getattr(a, "checkpoint_interval_s", None):
            env[contract.ENV_CHECKPOINT_INTERVAL] = f"{first:.0f}"
        if claim_wait_s is not None:
            env[contract.ENV_CLAIM_WAIT] = f"{claim_wait_s:.0f}"
        caps = provider.capabilities
        tags = {
            TAG_JOB: caps.label(job.id),
            TAG_ATTEMPT: caps.label(a.id),
            TAG_OWNER: memo.owner_label(caps, self._config().daemon.owner),
        }
        if self.install_id:
            tags[TAG_INSTALL] = caps.label(self.install_id)
        group = None
        if a.nodes > 1:
            # Every node: the gang's size and one rendezvous id; the provider adds each
            # node's rank and node 0's address (contract.ENV_NODE_RANK, ENV_RDZV_ENDPOINT).
            env[contract.ENV_RDZV_ID] = a.id
            # How long a node waits for a replacement's round after losing a peer (0: never).
            wait = gang_wrapper_wait(self._config())
            if wait:
                env[rendezvous.ENV_RDZV_WAIT_S] = str(wait)
            if caps.placement_groups:
                group = caps.label(f"spotwise-{a.id}")
        else:
            tags[TAG_NODE] = "0"
        return LaunchRequest(
            token=a.token,
            offering=o,
            command=list(spec.command),  # specs are shared within a call
            env=env,
            tags=tags,
            count=a.nodes,
            placement_group=group,
            max_price_per_hour=spec.max_price_per_hour,
        )
