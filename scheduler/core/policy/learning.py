"""Online estimates of spot availability per pool (zone), learned from what was observed.

Each pool is a two-state process: while available it is lost at rate `lam` (per hour), while
unavailable it comes back at rate `mu`. Estimates shrink towards the pooled rate across all
pools, which itself starts from a weak generic prior, so a pool seen for minutes behaves like
an average pool and one seen for days speaks for itself.

Outages are not memoryless: most are short, a few last for days (on the train split's pools
the median outage is well under the mean). So besides the rates, each pool keeps the lengths
of its recent outages, and `outage_left` says how long an outage that has lasted this long
is still expected to last, from the outages that lasted longer: once past the many short
ones, what is left is the long ones' rest (past the longest on record, the rate model's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# Generic priors (not fitted to any trace): spot runs last ~10 h, outages ~2 h.
PRIOR_LOSS_RATE = 0.1
PRIOR_RETURN_RATE = 0.5
PRIOR_HOURS = 6.0  # weight of the prior, in observed hours
# Spot markets drift: evidence loses half its weight per this many hours:
# docs/designs/deadline-policy-tuning-history.md#half_life_hours
HALF_LIFE_HOURS = 24.0
# Outages kept per pool for `outage_left`: those still weighing at least MIN_OUTAGE_WEIGHT
# (with the half-life above, about a week), at most MAX_OUTAGES (the oldest go first).
MIN_OUTAGE_WEIGHT = 0.01
MAX_OUTAGES = 512
# Weight, in outages, of the rate model's estimate (1 / return rate) in `outage_left`, so
# a pool with few outages like the current one leans on its rates:
# docs/designs/deadline-policy-tuning-history.md#outage_prior
OUTAGE_PRIOR = 1.0


@dataclass
class PoolStats:
    up_hours: float = 0.0
    down_hours: float = 0.0
    losses: float = 0.0
    returns: float = 0.0
    last: bool | None = None
    since: float | None = None  # when the current state began, or was first seen
    since_seen: bool = False  # we saw it begin (else `since` only bounds its age from below)
    # [hours, weight / scale] per finished outage; `scale` carries the decay of all of them,
    # so an update costs O(1) and the weights need no clock (jobs have their own clocks)
    outages: list[list[float]] = field(default_factory=list)
    scale: float = 1.0
    # the last price seen: the daemon shows a pool without capacity unpriced, and what an
    # outage keeps the job from is priced by what the pool cost when it was last up
    price: float | None = None

    def record_outage(self, hours: float) -> None:
        floor = MIN_OUTAGE_WEIGHT / self.scale
        if self.outages and self.outages[0][1] < floor:  # oldest first: drop the faded
            self.outages = [e for e in self.outages if e[1] >= floor]
        if self.scale < 1e-12:  # renormalise before the stored weights overflow
            self.outages = [[h, w * self.scale] for h, w in self.outages]
            self.scale = 1.0
        self.outages.append([hours, 1.0 / self.scale])
        if len(self.outages) > MAX_OUTAGES:
            del self.outages[0]


@dataclass
class AvailabilityModel:
    pools: dict[str, PoolStats] = field(default_factory=dict)
    last_time: float | None = None
    _cache: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)
    _left: dict[str, float] = field(default_factory=dict, repr=False)

    def update(
        self,
        now: float,
        available: dict[str, bool] | object,
        prices: Mapping[str, float] | None = None,
    ) -> None:
        """Account the time since the last update to each pool's previous state (and keep
        each pool's last finite price, where `prices` are given)."""
        dt = 0.0 if self.last_time is None or now < self.last_time else now - self.last_time
        self.last_time = now
        self._cache.clear()
        self._left.clear()
        keep = 0.5 ** (dt / HALF_LIFE_HOURS) if dt else 1.0
        for zone, ok in available.items():  # type: ignore[attr-defined,union-attr]
            st = self.pools.get(zone)
            if st is None:
                st = self.pools[zone] = PoolStats()
            if st.last is not None:
                if keep != 1.0:
                    st.up_hours *= keep
                    st.down_hours *= keep
                    st.losses *= keep
                    st.returns *= keep
                    st.scale *= keep
                if st.last:
                    st.up_hours += dt
                else:
                    st.down_hours += dt
                if st.last and not ok:
                    st.losses += 1
                elif ok and not st.last:
                    st.returns += 1
                    if st.since_seen and st.since is not None and now > st.since:
                        st.record_outage(now - st.since)
            if st.last is None or st.last != bool(ok) or st.since is None:
                # a change is seen to begin; on first sight (or in a state saved without
                # `since`) the state began by now at the latest: its age is a lower bound and
                # its length, unknown, is not recorded
                st.since_seen = st.last is not None and st.last != bool(ok)
                st.since = now
            st.last = bool(ok)
            if prices is not None:
                p = prices.get(zone)
                if p is not None and math.isfinite(p):
                    st.price = float(p)

    def _pooled(self) -> tuple[float, float]:
        up = sum(s.up_hours for s in self.pools.values())
        down = sum(s.down_hours for s in self.pools.values())
        losses = sum(s.losses for s in self.pools.values())
        returns = sum(s.returns for s in self.pools.values())
        lam = (losses + PRIOR_LOSS_RATE * PRIOR_HOURS) / (up + PRIOR_HOURS)
        mu = (returns + PRIOR_RETURN_RATE * PRIOR_HOURS) / (down + PRIOR_HOURS)
        return lam, mu

    def rates(self, zone: str) -> tuple[float, float]:
        """(loss rate while up, return rate while down), per hour."""
        hit = self._cache.get(zone)
        if hit is not None:
            return hit
        if "" not in self._cache:
            self._cache[""] = self._pooled()
        lam0, mu0 = self._cache[""]
        st = self.pools.get(zone) or PoolStats()
        lam = (st.losses + lam0 * PRIOR_HOURS) / (st.up_hours + PRIOR_HOURS)
        mu = (st.returns + mu0 * PRIOR_HOURS) / (st.down_hours + PRIOR_HOURS)
        self._cache[zone] = (lam, mu)
        return lam, mu

    def outage_left(self, zone: str) -> float:
        """Expected hours until `zone`, down now, is back: over its recent outages that lasted
        longer than this one has so far, how much longer they went on (weighted by recency),
        blended with the rate model's 1 / return rate (OUTAGE_PRIOR outages' worth)."""
        hit = self._left.get(zone)
        if hit is not None:
            return hit
        prior = 1.0 / self.rates(zone)[1]
        st = self.pools.get(zone)
        if st is None or st.last is not False:
            return prior
        age = self.outage_age(zone)
        weight = longer = 0.0
        for hours, w in st.outages:
            if hours > age:
                weight += w
                longer += w * (hours - age)
        left = (longer * st.scale + OUTAGE_PRIOR * prior) / (weight * st.scale + OUTAGE_PRIOR)
        self._left[zone] = left
        return left

    def outage_age(self, zone: str) -> float:
        """Hours `zone` has been down (0 if it is up or was never seen); for an outage
        already under way when first seen, the hours since then (a lower bound)."""
        return self._age(zone, up=False)

    def spell_age(self, zone: str) -> float:
        """Hours `zone` has been up (0 if it is down or was never seen); a lower bound for a
        spell already under way when first seen."""
        return self._age(zone, up=True)

    def saw_begin(self, zone: str) -> bool:
        """Whether the current state of `zone` (up or down) was seen to begin, so its age is
        known, not just bounded from below."""
        st = self.pools.get(zone)
        return st is not None and st.since_seen

    def _age(self, zone: str, up: bool) -> float:
        st = self.pools.get(zone)
        last = self.last_time
        if st is None or st.last is not up or st.since is None or last is None:
            return 0.0
        return max(0.0, last - st.since)

    def last_price(self, zone: str) -> float | None:
        st = self.pools.get(zone)
        return None if st is None else st.price

    def availability(self, zone: str) -> float:
        lam, mu = self.rates(zone)
        return mu / (lam + mu)
