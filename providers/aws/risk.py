"""Spot placement scores (GetSpotPlacementScores): AWS's own 1-10 word on each zone's spot
capacity, read behind a cache that respects the API's limits.

A score asked for one or two instance types "will always be low" (the API reference, on
InstanceTypes), so one call per region asks for the region's spot GPU types together
(SingleAvailabilityZone: a score per zone) and every spot pool of a zone takes its zone's
score: a zone-level prior, not a per-type one. The API answers per Availability Zone *id*
("use1-az1"), which names a different zone in every account, so ids are resolved with
DescribeAvailabilityZones (cached). AWS limits how many distinct configurations an account
may ask about in 24 hours, so a region is asked at most once per RISK_REFRESH and at most
RISK_CALLS_PER_POLL regions per poll; a refused or failed call leaves the region unscored
(its pools keep the configured prior) until RISK_REFRESH has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from providers.aws.ttl import RISK_CALLS_PER_POLL, RISK_REFRESH
from providers.base import Market, Offering, RiskKind, RiskSignal, pool_key
from providers.risk_cache import RiskAnswers

# Instance types per call: enough for a region's GPU families, bounded so one request stays
# one configuration.
MAX_TYPES = 50


class PlacementScores:
    def __init__(
        self,
        ec2: Callable[[str], Any],
        now: Callable[[], datetime],
        emit: Callable[[str], None],
    ) -> None:
        self._ec2 = ec2
        # region -> zone name -> score
        self._scores: RiskAnswers[str, dict[str, float]] = RiskAnswers(
            RISK_REFRESH, RISK_CALLS_PER_POLL, now, emit
        )
        self._zone_names: dict[str, dict[str, str]] = {}  # region -> zone id -> zone name

    def _zones(self, region: str) -> dict[str, str]:
        names = self._zone_names.get(region)
        if names is None:
            resp = self._ec2(region).describe_availability_zones()
            names = {z["ZoneId"]: z["ZoneName"] for z in resp.get("AvailabilityZones", [])}
            self._zone_names[region] = names
        return names

    def _ask(self, region: str, types: list[str]) -> dict[str, float]:
        resp = self._ec2(region).get_spot_placement_scores(
            InstanceTypes=types[:MAX_TYPES],
            TargetCapacity=1,
            TargetCapacityUnitType="units",
            SingleAvailabilityZone=True,
            RegionNames=[region],
        )
        names = self._zones(region)
        out: dict[str, float] = {}
        for item in resp.get("SpotPlacementScores", []):
            zone = names.get(item.get("AvailabilityZoneId", ""))
            score = item.get("Score")
            if zone and isinstance(score, int | float):
                out[zone] = float(score)
        return out

    def signals(self, offerings: Sequence[Offering]) -> list[RiskSignal]:
        """One signal per spot offering whose zone has a score; each region asked if it was
        not asked within RISK_REFRESH."""
        spot = [o for o in offerings if o.market is Market.SPOT]
        types: dict[str, set[str]] = {}
        for o in spot:
            types.setdefault(o.region, set()).add(o.instance_type)
        self._scores.refresh(
            sorted(types),
            lambda region: self._ask(region, sorted(types[region])),
            lambda region, exc: f"aws: no spot placement scores in {region}: {exc}",
        )
        out = []
        for o in spot:
            score = (self._scores.get(o.region) or {}).get(o.zone)
            if score is not None:
                pool = pool_key(o.cloud, o.zone, o.instance_type, o.market)
                out.append(RiskSignal(pool, RiskKind.AWS_PLACEMENT_SCORE, score))
        return out
