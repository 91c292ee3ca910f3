"""Online estimates of spot availability per pool (zone), learned from what was observed.

Each pool is a two-state process: while available it is lost at rate `lam` (per hour), while
unavailable it comes back at rate `mu`. Estimates shrink towards the pooled rate across all
pools, which itself starts from a weak generic prior, so a pool seen for minutes behaves like
an average pool and one seen for days speaks for itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Generic priors (not fitted to any trace): spot runs last ~10 h, outages ~2 h.
PRIOR_LOSS_RATE = 0.1
PRIOR_RETURN_RATE = 0.5
PRIOR_HOURS = 6.0  # weight of the prior, in observed hours
# Spot markets drift: evidence loses half its weight per this many hours.
HALF_LIFE_HOURS = 24.0


@dataclass
class PoolStats:
    up_hours: float = 0.0
    down_hours: float = 0.0
    losses: float = 0.0
    returns: float = 0.0
    last: bool | None = None


@dataclass
class AvailabilityModel:
    pools: dict[str, PoolStats] = field(default_factory=dict)
    last_time: float | None = None
    _cache: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)

    def update(self, now: float, available: dict[str, bool] | object) -> None:
        """Account the time since the last update to each pool's previous state."""
        dt = 0.0 if self.last_time is None or now < self.last_time else now - self.last_time
        self.last_time = now
        self._cache.clear()
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
                if st.last:
                    st.up_hours += dt
                else:
                    st.down_hours += dt
                if st.last and not ok:
                    st.losses += 1
                elif ok and not st.last:
                    st.returns += 1
            st.last = bool(ok)

    def record_interruption(self, zone: str) -> None:
        """An interruption we suffered (daemon path: seen without a probe)."""
        self._cache.clear()
        st = self.pools.setdefault(zone, PoolStats())
        if st.last is not False:
            st.losses += 1
        st.last = False

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

    def availability(self, zone: str) -> float:
        lam, mu = self.rates(zone)
        return mu / (lam + mu)
