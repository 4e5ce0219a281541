"""``default``: budgeteer's own deadline-aware spot policy.

It uses only what has been observed (the zone's availability and prices up to now) and keeps the
same hard guarantee as the Safety Net: it never lets the slack (time to spare if the job ran
without a break) fall below what one more changeover needs, so it never misses a deadline that
on-demand from the start could meet.

The idea: slack is the currency. Waiting out an outage idle costs slack but no money; bridging it
on on-demand costs money but no slack; every trip back to spot and (if preempted) back to
on-demand costs two changeovers of slack. So the policy keeps a *reserve* of slack sized to the
trips it still expects to need — ``2d`` per expected preemption over the remaining work, from the
zone's observed preemption rate — and spends only the slack above it on waiting:

- on spot: stay (it is the cheapest place to be);
- spot available, not on spot: go to spot if the slack allows a later fallback (≥ 2d) and the
  expected stint saves more than the changeovers cost (from the observed mean spot lifetime and
  the current prices); never when spot costs more than on-demand;
- spot unavailable: wait idle while the slack is above the reserve, or while the outage is still
  shorter than a changeover round trip (waiting is then cheaper in both slack and money);
  otherwise bridge on on-demand.

Example (C = 10 h, R = 12 h, d = 0.2 h, preemption rate 0.3/h → reserve ≈ 2·0.2·0.3·10 + 0.4 =
1.6 h): an outage at t = 1 is waited out while slack > 1.6 h, i.e. for 0.4 h; then on-demand
until spot returns; back to spot (slack ≈ 1.6 − 0.2); and the reserve shrinks as work gets done.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from budgeteer.core.spot.replay import Decider, Market, Mode, Observation, SpotJob

#: Prior belief about spot preemptions per available hour and its weight in hours of evidence;
#: the prior is the median of the six 1-node V100 availability traces (see catalog loader).
PRIOR_RATE_PER_HOUR = 0.3
PRIOR_WEIGHT_HOURS = 12.0
HISTORY_DAYS = 7.0
#: Prior outage lengths (exponential quantiles) used when the history holds few outages.
PRIOR_OUTAGES = 8
PRIOR_OUTAGE_MEAN_HOURS = 0.5
#: Share of the expected slack needs of future outages kept in reserve.
RESERVE_SHARE = 1.0


def _runs(available: np.ndarray, value: bool) -> np.ndarray:
    """Lengths (ticks) of the maximal runs of ``value`` in ``available``."""
    x = np.concatenate([[False], available == value, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(x))
    return (edges[1::2] - edges[::2]).astype(np.float64)


@dataclass(frozen=True, slots=True)
class ZoneModel:
    """What the zone's history says: preemptions per spot hour and outage lengths (hours)."""

    rate_per_hour: float
    outages_hours: np.ndarray

    @classmethod
    def from_history(cls, available: np.ndarray, gap_hours: float) -> ZoneModel:
        """Estimates from a window of availability, shrunk towards the prior when short."""
        up_hours = float(available[:-1].sum()) * gap_hours if len(available) > 1 else 0.0
        drops = int((available[:-1] & ~available[1:]).sum()) if len(available) > 1 else 0
        rate = (drops + PRIOR_RATE_PER_HOUR * PRIOR_WEIGHT_HOURS) / (up_hours + PRIOR_WEIGHT_HOURS)
        outages = _runs(available, False)
        if len(available) and not available[0]:
            outages = outages[1:]  # the first outage is censored at the window start
        if len(available) and not available[-1] and len(outages):
            outages = outages[:-1]  # so is the one still going on
        outages = outages * gap_hours
        if len(outages) < PRIOR_OUTAGES:
            prior = -PRIOR_OUTAGE_MEAN_HOURS * np.log(
                1 - (np.arange(PRIOR_OUTAGES) + 0.5) / PRIOR_OUTAGES
            )
            outages = np.concatenate([outages, prior[: PRIOR_OUTAGES - len(outages)]])
        return cls(rate, np.sort(outages))

    def bridge_plan(self, d: float) -> tuple[float, float]:
        """The wait ``τ`` before bridging an outage on on-demand that minimises the expected
        slack an outage costs, ``E[min(L, τ)] + 2d·P(L > τ)``, and that expected cost."""
        o = self.outages_hours
        taus = np.concatenate([[0.0], o])
        cost = np.array([np.minimum(o, t).mean() + 2 * d * (o > t).mean() for t in taus])
        k = int(np.argmin(cost))
        return float(taus[k]), float(cost[k])


@dataclass(slots=True)
class _Stats:
    """Availability statistics over a rolling window, updated tick by tick (memo only)."""

    tick: int = -1
    up_ticks: int = 0
    drops: int = 0
    outage_start: int | None = None


@dataclass
class DefaultDecider:
    """The ``default`` policy prepared for one run (see the module docstring)."""

    job: SpotJob
    window_ticks: int
    zone: ZoneModel
    stats: _Stats = field(default_factory=_Stats)
    plan: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        self.plan = self.zone.bridge_plan(self.job.changeover_hours)

    def _rate_per_hour(self, obs: Observation) -> float:
        """Preemptions per hour on spot, from the window before now, with the prior."""
        s = self.stats
        if s.tick != obs.tick - 1:
            hist = obs.history[-self.window_ticks :]
            s.up_ticks = int(hist[:-1].sum()) if len(hist) > 1 else 0
            s.drops = int((hist[:-1] & ~hist[1:]).sum()) if len(hist) > 1 else 0
            outage = np.flatnonzero(hist)
            s.outage_start = (
                None
                if hist[-1]
                else (obs.tick - (len(hist) - 1 - int(outage[-1])) if len(outage) else obs.tick)
            )
        else:
            prev = bool(obs.history[-2]) if len(obs.history) > 1 else False
            s.up_ticks += prev
            s.drops += prev and not obs.spot_available
            if obs.spot_available:
                s.outage_start = None
            elif s.outage_start is None:
                s.outage_start = obs.tick
        s.tick = obs.tick
        up_hours = s.up_ticks * obs.gap_hours
        return (s.drops + PRIOR_RATE_PER_HOUR * PRIOR_WEIGHT_HOURS) / (
            up_hours + PRIOR_WEIGHT_HOURS
        )

    def decide(self, obs: Observation) -> Mode:
        """See the module docstring."""
        d = self.job.changeover_hours
        g = obs.gap_hours
        rate = self._rate_per_hour(obs)
        slack = obs.slack_hours
        p_spot, p_od = obs.spot_usd_per_hour, self.job.on_demand_usd_per_hour
        if obs.mode is Mode.SPOT:
            return Mode.SPOT
        can_try_spot = slack >= 2 * d + g - 1e-9
        if obs.spot_available and can_try_spot and p_spot < p_od:
            if obs.mode is not Mode.ON_DEMAND:
                return Mode.SPOT
            stint = min(1.0 / rate, obs.remaining_work_hours)
            p_preempt = 1.0 - np.exp(-rate * obs.remaining_work_hours)
            saving = (p_od - p_spot) * stint - d * p_spot - p_preempt * d * p_od
            if saving > 0:
                return Mode.SPOT
            return Mode.ON_DEMAND
        if slack < 2 * d + g - 1e-9:
            return Mode.ON_DEMAND  # the safety net: slack is down to one fallback
        tau, per_outage = self.plan
        reserve = RESERVE_SHARE * rate * obs.remaining_work_hours * per_outage + 2 * d + g
        if obs.spot_available:  # spot dearer than on-demand, or no slack to try it
            return Mode.ON_DEMAND
        if obs.mode is Mode.ON_DEMAND:
            return Mode.IDLE if slack > reserve + 2 * d else Mode.ON_DEMAND
        if slack > reserve:
            return Mode.IDLE
        outage_hours = (obs.tick - (self.stats.outage_start or obs.tick)) * g
        return Mode.IDLE if outage_hours < tau else Mode.ON_DEMAND


class Default:
    """Budgeteer's own policy; see :mod:`budgeteer.core.spot.model`."""

    name = "default"

    def prepare(self, job: SpotJob, history: Market) -> Decider:
        """A decider with a rolling window of ``HISTORY_DAYS`` of availability."""
        window = max(2, int(HISTORY_DAYS * 24 / history.gap_hours))
        zone = ZoneModel.from_history(history.available[-window:], history.gap_hours)
        return DefaultDecider(job, window, zone)
