"""spotwise: our default deadline policy. No future knowledge; learns pools online.

Idea: slack (time to spare after the remaining work and one restart) only ever shrinks, by
waiting and by restarts. Spend it where it buys most:
- keep a reserve of slack for the restarts still expected (RESTART_RESERVE x learned
  interruption rate x remaining work x the restart cost, doubled when no other pool is
  likely to be up), and at least PACE x the initial slack in proportion to the work left
  (all of it for a tight deadline, see TIGHT_LO), but that pacing never above PACE_CAP x
  the expected restarts' slack;
- above the reserve, wait out outages instead of paying on-demand, until the slack an
  outage has burned beyond the on-demand it avoided would have paid an on-demand launch
  (ski rental, _rent_paid: with slack short of the restarts still to come it is worth more
  than on-demand; with ample slack, never); a bridge is held until spot is back;
- at the reserve, run on-demand, but jump back to spot as soon as a pool is up and the
  expected saving over its expected run beats the restart's cost (the restart back to
  on-demand that ends a run of spells is shared by the spells the spare slack lets the job
  chain, _chain_spells); but wait the outage out
  instead (as greedy does) when the regret hedge's margin left could not pay for the
  on-demand launch and the relaunch on spot: such a bridge would lock the job on on-demand,
  and finishing on on-demand costs the same later; nor bridge an outage expected to end
  within a restart (SHORT_OUTAGE): the on-demand launch would do no work before it (an
  outage's expected rest grows with how long it has lasted: learning.outage_left);
- while the regret hedge's margin left pays for only a few failed launches
  (MARGIN_LAUNCHES), launch only into a spell that has already lasted part of a restart
  (SPELL_AGE) and wait out younger ones above the reserve: in a flaky stretch every launch
  that dies inside its overhead spends margin, and once it is gone the hedge keeps the job
  on on-demand for good (_spares_margin);
- a spot spell is expected to last its learned mean, and, for a pool up now unless the
  deadline is tight, at least twice as long again as it has already lasted (spells are
  heavy-tailed: SPELL_RESIDUAL, _spell_hours), and the interruptions priced into its rate
  are one per expected spell;
- among pools, rank by price inflated by expected interruption losses plus the one-off
  launch cost spread over the expected run; wait for a clearly cheaper pool only when there
  is spare slack for the expected wait.
Restarts are priced at the overhead plus the work an interruption is expected to throw away
(half the checkpoint interval), so high overheads and sparse checkpoints mean fewer switches;
the slack a restart uses is priced by what it still buys: more when the slack left is short
of the restarts finishing on spot would take (_slack_value).
Hard safety (as in greedy/UP): never start or keep spot without slack for one more
restart, never wait without time to launch on-demand at the next decision.
Guards applied last (scheduler.core.policy.safety): a zone priced above on-demand counts as
unavailable (with hysteresis), and the regret hedge turns any spot tick whose worst case
(through the tick or the rest of the launch overhead) could push the job past
(1 + HEDGE_MARGIN) x all-on-demand into on-demand; on-demand is not left to wait for spot
the hedge would refuse.
An optional arbiter (ARBITER, off): where greedy or UP would do a different kind of thing,
Monte Carlo rollouts on the learned model (scheduler.core.policy.rollout) pick whose action to
take. Every variant tried cost more than the rule alone on the train split, so it is off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from . import rollout
from .base import EPS, ON_DEMAND, SPOT, WAIT, Action, ActionKind, Observation, Policy
from .basic import GreedyPolicy
from .learning import AvailabilityModel
from .safety import (
    can_leave_on_demand,
    can_wait,
    hedge_allows_idle,
    hedge_allows_spot,
    hedge_margin,
    price_filtered,
    price_ok,
    regret_if_committed,
    spot_is_safe,
)
from .uniform_progress import UniformProgressPolicy

# Share of the initial slack kept in proportion to the work left, so early outages cannot
# eat the slack later restarts need: docs/designs/deadline-policy-tuning-history.md#pace
PACE = 0.3
# Share of the expected restarts' slack held in reserve; more sent 1 h-overhead jobs to
# on-demand with their slack unused: docs/designs/deadline-policy-tuning-history.md#restart_reserve
RESTART_RESERVE = 0.125
# The pace share never exceeds this many times the expected restarts' slack, so a large
# slack can still wait outages out: docs/designs/deadline-policy-tuning-history.md#pace_cap
PACE_CAP = 3.0
# Rollout verdicts are recomputed at most once per this many hours of the job for the same
# set of competing actions: a speed knob, the daemon's decision must stay cheap.
EVAL_HOURS = 1.0
# Off: every arbiter variant tried cost more than the rule alone (kept for
# tests/lab/replay/test_rollout.py): docs/designs/deadline-policy-tuning-history.md#arbiter
ARBITER = False
# Another candidate must beat our own rule by this many restarts' worth of on-demand to be
# followed: Monte Carlo noise and the model's own errors are of the order of one restart.
ROLLOUT_MARGIN = 1.0
# Bridge an outage on on-demand only while the hedge's margin left pays for this many
# bridges (an on-demand launch and a spot relaunch each):
# docs/designs/deadline-policy-tuning-history.md#bridge_k
BRIDGE_K = 1.0
# No on-demand bridge when spot is expected back within this many restart overheads: the
# launch would do no work before it: docs/designs/deadline-policy-tuning-history.md#short_outage
SHORT_OUTAGE = 1.0
# A tight deadline paces all of its slack: the pace share ramps from PACE (spare slack >=
# TIGHT_HI x the work) to 1 (<= TIGHT_LO x the work):
# docs/designs/deadline-policy-tuning-history.md#tight_lo
TIGHT_LO = 0.05
TIGHT_HI = 0.15
# While the hedge's margin left pays for fewer than MARGIN_LAUNCHES failed launches, launch
# from idle only into a spell that has lasted SPELL_AGE x the overhead, so a flaky stretch
# cannot spend the margin and lock the job on on-demand:
# docs/designs/deadline-policy-tuning-history.md#margin_launches
MARGIN_LAUNCHES = 12.0
SPELL_AGE = 0.5
# A spot spell that has lasted a hours is expected to last SPELL_RESIDUAL x a hours more
# (_spell_hours): the train split's median for spells aged 0.5-2 h, which
# tests/lab/replay/test_spell_age.py checks:
# docs/designs/deadline-policy-tuning-history.md#spell_residual
SPELL_RESIDUAL = 2.0


def _span(hours: float) -> str:
    """A short duration for the operator: seconds, minutes or hours."""
    if hours < 1.0 / 60.0:
        return f"{hours * 3600:.0f} s"
    return f"{hours * 60:.0f} min" if hours < 1.0 else f"{hours:.1f} h"


def _initial_share(obs: Observation) -> float:
    """The job's initial slack (after one restart) per hour of work."""
    return (obs.deadline - obs.work_total - obs.restart_overhead) / obs.work_total


def pace_share(spare: float) -> float:
    """Share of the initial slack paced over the work, for `spare` hours of initial slack
    per hour of work: PACE when the slack is ample, 1 (UP's line) when it is tight."""
    tight = min(1.0, max(0.0, (TIGHT_HI - spare) / (TIGHT_HI - TIGHT_LO)))
    return PACE + (1.0 - PACE) * tight


class SpotwisePolicy(Policy):
    name = "spotwise"

    def __init__(self, model: AvailabilityModel | None = None) -> None:
        self.model = model or AvailabilityModel()
        self._shared = model is not None
        self._ledger = 0.0  # own spend estimate, used when observations carry no `spent`
        self._others = (GreedyPolicy(), UniformProgressPolicy())  # stateless
        # (actions compared, hour bucket) -> winning candidate: a cache only (recomputed
        # after a restart from the restored model), so it need not be persisted
        self._verdicts: dict[tuple[tuple[str, ...], int], int] = {}
        self.rollouts = 0  # how many Monte Carlo evaluations ran (for the benchmark)
        self._why: str | None = None  # why the last decision waited, when not the usual

    def reset(self) -> None:
        self._ledger = 0.0
        self._verdicts.clear()
        if not self._shared:
            self.model = AvailabilityModel()

    def warm_up(self, history: Sequence[tuple[float, Mapping[str, bool]]]) -> None:
        """Learn from pool availability seen before the job (elapsed hours < 0)."""
        for at, available in history:
            self.model.update(at, available)

    def observe(self, obs: Observation) -> None:
        self.model.update(obs.elapsed, obs.spot_available, obs.spot_price)

    # ---- estimates -------------------------------------------------------------------

    def _expected_run(self, obs: Observation, zone: str) -> float:
        return max(min(obs.remaining_work, self._spell_hours(obs, zone)), EPS)

    def _spell_hours(self, obs: Observation, zone: str) -> float:
        """Expected hours a spot spell in `zone` lasts from now: 1 / its loss rate, but for
        a pool up now, unless the deadline is tight, at least SPELL_RESIDUAL x as long as
        this spell has lasted. Spells are heavy-tailed, like outages: after a flaky stretch
        the rate, learned with a day's half-life, kept calling a pool that had been up for
        hours "lost within the hour", and a job at its reserve stayed on on-demand beside
        it. A tight deadline (initial slack under TIGHT_HI x the work) cannot afford the
        restart a wrong bet costs, so it keeps to the rate."""
        lam, _ = self.model.rates(zone)
        spell = 1.0 / lam
        if _initial_share(obs) >= TIGHT_HI:
            spell = max(spell, SPELL_RESIDUAL * self.model.spell_age(zone))
        return spell

    def _rate_cost(self, obs: Observation, zone: str) -> float:
        """$ per hour of work on `zone`, counting restarts its interruptions will cause (one
        per expected spell, _spell_hours)."""
        loss = obs.expected_loss_per_interruption / self._spell_hours(obs, zone)
        return obs.spot_price[zone] * (1.0 + loss)

    def _launch_cost(self, obs: Observation, zone: str) -> float:
        return obs.restart_overhead * obs.spot_price[zone] + obs.migration_cost.get(zone, 0.0)

    def _score(self, obs: Observation, zone: str) -> float:
        """$ per hour of work if we launch `zone` now."""
        run = self._expected_run(obs, zone)
        return self._rate_cost(obs, zone) + self._launch_cost(obs, zone) / run

    def _fallback_factor(self, obs: Observation) -> float:
        """Restarts one interruption costs: 1 if another pool is likely up, else 2."""
        p_none = 1.0
        for zone in obs.spot_price:
            p_none *= 1.0 - self.model.availability(zone)
        return 1.0 + min(1.0, p_none * len(obs.spot_price)) if obs.spot_price else 2.0

    def _reserve(self, obs: Observation) -> float:
        return obs.tick_hours + obs.restart_overhead + self._reserve_slope(obs) * obs.remaining_work

    def _reserve_slope(self, obs: Observation) -> float:
        """Hours of reserve per hour of work left (above one tick and one restart): every
        term of the reserve is proportional to the work left."""
        zones = list(obs.spot_price)
        if not zones:
            return -obs.restart_overhead / max(obs.remaining_work, EPS)
        best = min(zones, key=lambda z: self._rate_cost(obs, z))
        lam, _ = self.model.rates(best)
        restarts = obs.expected_loss_per_interruption * self._fallback_factor(obs) * lam
        share = _initial_share(obs)
        pace = min(pace_share(share) * share, PACE_CAP * restarts)
        return max(RESTART_RESERVE * restarts, pace)

    # ---- decision --------------------------------------------------------------------

    def decide(self, obs: Observation) -> Action:
        """The cost-seeking choice, then the price and regret guards; keeps the ledger."""
        self._why = None
        obs = price_filtered(self._with_last_prices(obs))
        cur = obs.on_spot
        if cur is not None and not obs.spot_available.get(cur, False):
            # the running zone was priced out: decide as if stopped (leaving it is the point)
            obs = replace(obs, placement=None, remaining_overhead=0.0)
        spent = obs.spent if obs.spent is not None else self._ledger
        act = self._choose(obs, spent)
        if ARBITER:
            act = self._arbitrate(obs, act)
        if act.kind is ActionKind.SPOT and not hedge_allows_spot(obs, act.zone or "", spent):
            # the hedge: on-demand from here on (regret stays flat on on-demand)
            act = SPOT(act.zone or "") if obs.slack_if_launch < -EPS and obs.on_spot else ON_DEMAND
        elif act.kind is ActionKind.WAIT and obs.on_demand and not self._may_leave(obs, spent):
            act = ON_DEMAND
        if act.kind is not ActionKind.WAIT:
            self._why = None
        if act.kind is ActionKind.SPOT:
            price = obs.spot_price.get(act.zone or "", 0.0)
            if act != obs.placement:
                self._ledger += obs.migration_cost.get(act.zone or "", 0.0)
        else:
            price = obs.on_demand_price if act.kind is ActionKind.ON_DEMAND else 0.0
        self._ledger += price * obs.tick_hours
        return act

    def wait_reason(self) -> str:
        return self._why or super().wait_reason()

    def _with_last_prices(self, obs: Observation) -> Observation:
        """`obs` with each pool shown without a price (the daemon's pools without capacity)
        priced at the last price seen there, as the replay shows a pool that is down at its
        market price: the outage rules and the hedge's checks then judge the daemon's
        outages as the bench's. Pools never seen priced stay unpriced."""
        if all(math.isfinite(p) for p in obs.spot_price.values()):
            return obs
        prices = dict(obs.spot_price)
        for zone, p in obs.spot_price.items():
            last = None if math.isfinite(p) else self.model.last_price(zone)
            if last is not None:
                prices[zone] = last
        return replace(obs, spot_price=prices)

    def _may_leave(self, obs: Observation, spent: float) -> bool:
        """Stopping on-demand to wait for spot keeps regret within the margin, and the hedge
        would let some pool we could enter launch at its known price: otherwise the wait can
        only end back on on-demand, paying its launch overhead again (waiting spends nothing,
        so the hedge's verdict cannot change until a price does). A pool never seen priced
        (the daemon's, without capacity since the job began) is given the benefit of the
        doubt."""
        if not hedge_allows_idle(obs, spent):
            return False
        if not all(math.isfinite(p) for p in obs.spot_price.values()):
            return True
        # on on-demand no zone is ours, so price_ok applies the entry price
        return any(price_ok(obs, z) and hedge_allows_spot(obs, z, spent) for z in obs.spot_price)

    def _arbitrate(self, obs: Observation, own: Action) -> Action:
        """Our rule's action, unless greedy or UP would do a different kind of thing now and
        the rollouts (scheduler.core.policy.rollout) expect following that one to cost less."""
        first = [own, *(p.decide(obs) for p in self._others)]
        if len({a.kind for a in first}) == 1 or not obs.spot_price:
            return own
        key = (tuple(str(a) for a in first), math.floor(obs.elapsed / EVAL_HOURS + EPS))
        won = self._verdicts.get(key)
        if won is None:
            costs = rollout.expected_costs(obs, self._rollout_model(obs), first)
            self.rollouts += 1
            won = int(np.argmin(costs))
            if costs[won] > costs[0] - ROLLOUT_MARGIN * obs.on_demand_price * obs.restart_overhead:
                won = 0
            self._verdicts[key] = won
        return first[won]

    def _rollout_model(self, obs: Observation) -> rollout.Model:
        zones = tuple(obs.spot_price)
        rates = np.array([self.model.rates(z) for z in zones])
        order = sorted(range(len(zones)), key=lambda i: (self._rate_cost(obs, zones[i]), i))
        terms = np.array([self._switch_terms(obs, z) for z in zones])
        return rollout.Model(
            zones, rates[:, 0], rates[:, 1], self._reserve_slope(obs), terms.T.copy(),
            np.array(order, dtype=np.int64),
        )  # fmt: skip

    def _choose(self, obs: Observation, spent: float) -> Action:
        o, g = obs.restart_overhead, obs.tick_hours
        s_launch = obs.slack_if_launch
        reserve = self._reserve(obs)
        safe = [z for z in obs.available_zones() if z in obs.spot_price and spot_is_safe(obs, z)]
        best = min(safe, key=lambda z: (self._score(obs, z), z)) if safe else None
        cur = obs.on_spot

        if cur is not None:
            if not spot_is_safe(obs, cur):
                return ON_DEMAND if s_launch >= -EPS else SPOT(cur)
            if best is not None and best != cur and s_launch - o >= reserve:
                gain = (self._rate_cost(obs, cur) - self._rate_cost(obs, best)) * (
                    self._expected_run(obs, best)
                )
                if gain > self._launch_cost(obs, best) + self._slack_value(obs, best) * o:
                    return SPOT(best)
            return SPOT(cur)

        if obs.on_demand:
            if best is not None and self._switch_gain(obs, best) > 0:
                return SPOT(best)
            if best is None and self._awaited(obs) is not None:
                # a bridge is held until spot is back: leaving mid-outage throws away the
                # launch it paid for, and an outage that has lasted is expected to last
                # longer (it flapped: on-demand, wait, on-demand, a launch each time)
                return ON_DEMAND
            # Leave on-demand to wait only if spot is expected back within the spare slack;
            # otherwise the relaunch just burns an overhead.
            spare = s_launch - g - reserve - 2 * o
            if can_leave_on_demand(obs) and spare >= self._expected_outage(obs):
                return WAIT
            return ON_DEMAND

        # idle (not started, waiting, or just interrupted)
        if best is not None:
            cheaper = self._worth_waiting_for(obs, best, s_launch - reserve)
            if cheaper is None or not can_wait(obs):
                return WAIT if self._spares_margin(obs, best, spent, reserve) else SPOT(best)
            return WAIT
        if not can_wait(obs):
            return ON_DEMAND
        above = s_launch - g >= reserve - EPS
        # _can_bridge (each down pool's outage history) only when a bridge is wanted
        if (not above or self._rent_paid(obs)) and self._can_bridge(obs, spent):
            return ON_DEMAND
        return WAIT

    def _spares_margin(self, obs: Observation, zone: str, spent: float, reserve: float) -> bool:
        """Wait for the spell in `zone` to last SPELL_AGE x the overhead before launching
        into it, because the hedge's margin is nearly spent: a launch that dies inside its
        overhead bills it without progress, and with the margin gone the hedge allows no
        spot at all. Only for a spell the job saw begin, with slack above the reserve to
        wait on, and while the hedge would allow the launch at all; with no overhead a
        launch cannot die inside it."""
        if not can_wait(obs) or obs.slack_if_launch - obs.tick_hours < reserve:
            return False
        need, age = SPELL_AGE * obs.restart_overhead, self.model.spell_age(zone)
        if age >= need - EPS or not self.model.saw_begin(zone):
            # old enough; or a spell already under way at the job's first look: in the
            # bench, with a week of history, only spells older than the week are
            return False
        failed = obs.spot_price[zone] * max(obs.restart_overhead, obs.tick_hours)
        failed += obs.on_demand_price * obs.work_at_risk
        left = hedge_margin(obs) - regret_if_committed(obs, spent)
        if left >= MARGIN_LAUNCHES * failed or not hedge_allows_spot(obs, zone, spent):
            # margin to spare; or none even for this launch, which no wait would change
            return False
        self._why = (
            f"waiting for spot in {zone} to stay up {_span(need)}, up {_span(age)} so far"
            " (cost-guard margin low)"
        )
        return True

    def _switch_gain(self, obs: Observation, zone: str) -> float:
        """Expected $ saved by leaving on-demand for spot in `zone` now.

        Over the expected spell E, spot bills E at its rate instead of on-demand; the restart
        overhead's worth of work is not done and falls back to on-demand, and if the spell
        ends before the work does, coming back costs another restart (on-demand unless another
        pool is likely up) and both restarts use slack; that way back is paid once per chain
        of spells the spare slack allows, not once per spell.
        """
        per_hour, spell, fixed, back = self._switch_terms(obs, zone)
        w = obs.remaining_work
        return per_hour * max(min(w, spell), EPS) - fixed - (back if spell < w else 0.0)

    def _switch_terms(self, obs: Observation, zone: str) -> tuple[float, float, float, float]:
        """_switch_gain as (saving per spot hour, expected spell E, fixed cost, extra cost
        if the spell ends before the work): gain = saving x min(w, E) - fixed - [E < w] extra.

        The extra cost, the restart that ends the chain of spells, is shared by the spells
        of that chain (_chain_spells): with slack to spare, an interrupted spell is followed
        by another spell, not by the way back."""
        o, od = obs.restart_overhead, obs.on_demand_price
        lam, _ = self.model.rates(zone)
        rate = self._rate_cost(obs, zone)
        ff = self._fallback_factor(obs)  # 1: another pool likely up, 2: back to on-demand
        back_price = od if ff > 1.5 else rate
        sv = self._slack_value(obs, zone) * o
        fixed = od * o + obs.migration_cost.get(zone, 0.0) + sv
        back = (back_price * o + sv) / self._chain_spells(obs, lam, ff)
        return od - rate, self._spell_hours(obs, zone), fixed, back

    def _chain_spells(self, obs: Observation, lam: float, fallback: float) -> float:
        """Spot spells expected from one switch before the job is back on on-demand: one,
        plus one per restart the slack above the reserve (after this switch's restart) can
        pay for, at most the spells the work left takes (w x lam)."""
        spare = obs.slack_if_launch - obs.restart_overhead - self._reserve(obs)
        per_restart = max(obs.expected_loss_per_interruption * fallback, EPS)
        more = max(0.0, spare / per_restart)
        return 1.0 + min(more, max(0.0, obs.remaining_work * lam - 1.0))

    def _can_bridge(self, obs: Observation, spent: float) -> bool:
        """Running on-demand through this outage still leaves the regret hedge room to come
        back to spot afterwards.

        A bridge bills the on-demand launch's overhead (o x on-demand) and the relaunch on
        spot its own (o x the spot price), all without progress, and the hedge
        (safety.hedge_allows_spot) counts both against its margin. When the margin left cannot
        pay for both, the bridge commits the job to on-demand for good; then waiting (free,
        and regret-neutral) while the deadline allows is never worse: the on-demand finish
        costs the same later, and spot may come back. Nor is a bridge worth it when spot is
        expected back within the restart overhead (SHORT_OUTAGE).
        """
        if self._short_outage(obs):
            # spot is expected back before the on-demand launch would do any work: the
            # bridge would spend the same slack as waiting, and pay for it
            return False
        prices = [p for p in obs.spot_price.values() if math.isfinite(p)]
        if not prices:  # no spot to come back to: nothing for the margin to protect
            return True
        od, o = obs.on_demand_price, obs.restart_overhead
        cheapest = min(prices)
        left = hedge_margin(obs) - regret_if_committed(obs, spent)
        return left >= BRIDGE_K * (od + cheapest) * o + cheapest * obs.tick_hours

    def _short_outage(self, obs: Observation) -> bool:
        """The pools that are down, and worth coming back to, are expected back within
        SHORT_OUTAGE restarts. Pools that are up but priced out or unsafe are not an outage
        to wait for; a down pool with no known price (the daemon's) is counted. Only called
        while idle, so no down zone is ours and price_ok applies the entry price."""
        down = [
            z for z, p in obs.spot_price.items()
            if not obs.spot_available.get(z, False) and (not math.isfinite(p) or price_ok(obs, z))
        ]  # fmt: skip
        return self._expected_outage(obs, down) <= SHORT_OUTAGE * obs.restart_overhead

    def _expected_outage(self, obs: Observation, zones: Sequence[str] | None = None) -> float:
        """Expected hours until some pool (of `zones`, default all) is back: the soonest,
        taking each down pool's outage as a rate of 1 / what is left of it given how long it
        has lasted (AvailabilityModel.outage_left), a pool that is up by its return rate."""
        rates = [
            self.model.rates(z)[1] if obs.spot_available.get(z, False)
            else 1.0 / max(self.model.outage_left(z), EPS)
            for z in (obs.spot_price if zones is None else zones)
        ]  # fmt: skip
        return 1.0 / max(sum(rates), EPS) if rates else float("inf")

    def _slack_value(self, obs: Observation, zone: str) -> float:
        """$ an hour of slack is worth: at least an hour of on-demand avoided (the saving
        per hour of work on `zone`), times _slack_scarcity."""
        per_hour = max(0.0, obs.on_demand_price - self._rate_cost(obs, zone))
        return per_hour * self._slack_scarcity(obs, zone)

    def _slack_scarcity(self, obs: Observation, zone: str) -> float:
        """How many hours of on-demand an hour of slack avoids: 1 when slack is ample, more
        when it is short. Finishing on spot in `zone` takes about one restart per expected
        run: `need` hours of slack. With less than that, slack is what limits the spot hours
        left, and an hour of it is worth need / slack hours of on-demand avoided (at most the
        run / overhead spot hours one restart's slack buys)."""
        o = obs.restart_overhead
        if o <= EPS:
            return 1.0
        run = self._expected_run(obs, zone)
        need = obs.remaining_work / run * o
        return max(1.0, min(run / o, need / max(obs.slack_if_launch, o)))

    def _awaited(self, obs: Observation) -> tuple[str, float, float] | None:
        """The outage the job is waiting out: (the down pool worth entering that saves most
        per hour of work, that saving against on-demand, how long the outage has lasted,
        the youngest of those pools'). None when no down pool with a known price (the
        daemon's at the last price seen: _with_last_prices) would save."""
        od = obs.on_demand_price
        best: tuple[str, float] | None = None
        age = math.inf
        for zone in obs.spot_price:
            # idle or on on-demand no zone is ours: price_ok applies the entry price (and
            # refuses a pool never seen priced)
            if obs.spot_available.get(zone, False) or not price_ok(obs, zone):
                continue
            saving = od - self._rate_cost(obs, zone)
            if saving <= EPS:
                continue
            age = min(age, self.model.outage_age(zone))
            if best is None or saving > best[1]:
                best = (zone, saving)
        return None if best is None else (best[0], best[1], age)

    def _rent_paid(self, obs: Observation) -> bool:
        """Ski rental for an outage waited out above the reserve: waiting costs no money but
        burns slack, which while it is short (_slack_scarcity > 1) is worth more than the
        on-demand it avoids; bridge once what waiting has burned beyond that, over the
        outage so far, would have paid the on-demand launch (od x o). It needs no forecast
        of the outage's length (heavy-tailed: most are over within a tick, some last days):
        short ones are waited out, and a long one costs at most about twice the better
        choice in hindsight. With ample slack the excess is zero and the job waits."""
        awaited = self._awaited(obs)
        if awaited is None:
            return False
        zone, saving, age = awaited
        excess = saving * (self._slack_scarcity(obs, zone) - 1.0)
        if excess <= EPS:  # slack no dearer than the on-demand it avoids (or no overhead)
            return False
        return excess * age >= obs.on_demand_price * obs.restart_overhead - EPS

    def _worth_waiting_for(self, obs: Observation, best: str, spare: float) -> str | None:
        """A clearly cheaper pool that is down now but expected back well within the spare
        slack (the slack above the reserve)."""
        best_score = self._score(obs, best)
        for zone in sorted(obs.spot_price, key=lambda z: self._rate_cost(obs, z)):
            if obs.spot_available.get(zone, False):
                continue
            _, mu = self.model.rates(zone)
            wait = 1.0 / mu
            if spare - obs.tick_hours < 2.0 * wait:
                continue
            # Slack above the reserve is free to spend: any clear saving is worth the wait.
            saving = (best_score - self._score(obs, zone)) * self._expected_run(obs, zone)
            if saving > self._launch_cost(obs, zone):
                return zone
        return None
