"""Where launches go: the configured subnets (which decide the zones offered) and security
groups, per region, cached for ttl.NETWORK_REFRESH."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from providers.aws import ttl
from providers.aws.api import Api, paged
from providers.base import LaunchRejected


@dataclass(slots=True)
class Network:
    zones: dict[str, str] | None  # zone -> subnet; None = default VPC, every zone
    security_groups: list[str] = field(default_factory=list)

    def usable(self, zone: str) -> bool:
        return self.zones is None or zone in self.zones

    def subnet_for(self, zone: str) -> str | None:
        """The subnet to launch into (None: the default VPC's); LaunchRejected when subnets
        are configured but none is in `zone` (this offering, not the account, is wrong)."""
        if self.zones is None:
            return None
        subnet = self.zones.get(zone)
        if subnet is None:
            raise LaunchRejected(f"aws launch: no configured subnet in zone {zone}")
        return subnet


class Networks:
    def __init__(self, api: Api) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[datetime, Network]] = {}

    def get(self, region: str) -> Network:
        now = self._api.now()
        with self._lock:
            cached = self._cache.get(region)
        if cached is not None and now - cached[0] < ttl.NETWORK_REFRESH:
            return cached[1]
        net = self._fetch(region)
        with self._lock:
            self._cache[region] = (now, net)
        return net

    def _fetch(self, region: str) -> Network:
        s = self._api.settings
        ec2 = self._api.ec2(region)
        zones: dict[str, str] | None = None
        if s.subnet_ids:
            subnets = self._api.call(
                f"describe_subnets in {region}",
                lambda: paged(
                    ec2, "describe_subnets", "Subnets",
                    Filters=[{"Name": "subnet-id", "Values": s.subnet_ids}],
                ),
            )  # fmt: skip
            zones = {}
            for sn in sorted(subnets, key=lambda x: x["SubnetId"]):
                zones.setdefault(sn["AvailabilityZone"], sn["SubnetId"])
            if not zones:
                self._api.emit(
                    f"aws: none of the configured subnets is in {region}; nothing offered"
                )
        groups: list[str] = []
        if s.security_group_ids:
            found = self._api.call(
                f"describe_security_groups in {region}",
                lambda: paged(
                    ec2, "describe_security_groups", "SecurityGroups",
                    Filters=[{"Name": "group-id", "Values": s.security_group_ids}],
                ),
            )  # fmt: skip
            groups = sorted(g["GroupId"] for g in found)
        return Network(zones, groups)
