"""An in-memory Provider for decision and state-machine tests (no processes, no network)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime

from providers.base import (
    TAG_OWNER,
    EndReason,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Offering,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def offering(
    zone: str = "us-east-1a",
    itype: str = "p3.2xlarge",
    gpu: str = "V100",
    count: int = 1,
    price: float = 1.0,
    market: Market = Market.SPOT,
    cloud: str = "aws",
    mem: float = 16,
) -> Offering:
    region = zone[:-1] if cloud == "aws" else zone.rsplit("-", 1)[0]
    return Offering(
        cloud,
        region,
        zone,
        itype,
        gpu,
        count,
        mem,
        8 * count,
        61 * count,
        Market(market),
        price,
        NOW,
    )


class FakeProvider:
    name = "fake"

    def __init__(self, offerings: list[Offering]) -> None:
        self._offerings = offerings
        self.instances: dict[str, Instance] = {}
        self.tokens: dict[str, str] = {}
        self.launch_calls = 0
        self.fail_launch: dict[str, Exception] = {}  # pool -> error to raise
        self._ids = itertools.count(1)

    def offerings(self) -> list[Offering]:
        return list(self._offerings)

    def launch(self, request: LaunchRequest) -> Instance:
        self.launch_calls += 1
        err = self.fail_launch.get(request.offering.pool)
        if err is not None:
            raise err
        if request.token in self.tokens:
            return self.instances[self.tokens[request.token]]
        o = request.offering
        inst = Instance(
            id=f"i-{next(self._ids)}",
            cloud=o.cloud,
            region=o.region,
            zone=o.zone,
            instance_type=o.instance_type,
            market=o.market,
            state=InstanceState.RUNNING,
            tags=dict(request.tags),
            launched_at=NOW,
        )
        self.instances[inst.id] = inst
        self.tokens[request.token] = inst.id
        self.last_request = request
        return inst

    def describe(self, instance_ids: Sequence[str]) -> list[Instance]:
        return [self.instances[i] for i in instance_ids if i in self.instances]

    def terminate(self, instance_ids: Sequence[str]) -> None:
        for i in instance_ids:
            inst = self.instances.get(i)
            if inst and inst.state is not InstanceState.ENDED:
                self.end(i, EndReason.TERMINATED)

    def list_tagged(self, owner: str) -> list[Instance]:
        return [i for i in self.instances.values() if i.tags.get(TAG_OWNER) == owner]

    def find_by_token(self, token: str) -> Instance | None:
        iid = self.tokens.get(token)
        return self.instances.get(iid) if iid else None

    # test controls
    def end(self, instance_id: str, reason: EndReason, exit_code: int | None = None) -> None:
        inst = self.instances[instance_id]
        inst.state, inst.end_reason, inst.exit_code = InstanceState.ENDED, reason, exit_code

    def running(self) -> list[Instance]:
        return [i for i in self.instances.values() if i.state is not InstanceState.ENDED]
