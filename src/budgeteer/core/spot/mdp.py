"""``default``: an MDP over the replay semantics, solved by backward induction.

Availability is modelled as a small semi-Markov chain estimated from the zone's history before
the run: spot is up or down, and how long it has been so (in age buckets) changes the odds that
it flips — short outages and flapping windows are common, long ones last. The MDP state at the
start of a step is (elapsed steps ``e``, mode, availability state, lag ``q``), where the lag
counts steps without progress (idle or changeover), as in :mod:`budgeteer.core.spot.optimal`:
the job finishes at ``P + q`` steps, so the deadline holds iff ``q ≤ (R − C)/step``. A
changeover, once begun, runs to its end (or until spot is lost). Missing the deadline costs
infinity and every availability sequence has positive probability, so the MDP policy never takes
a risk some sequence could turn into a miss; the decider adds an exact safety net on top.

For fine traces the MDP runs on a coarser grid of ``k`` trace ticks per step (about a quarter of
a changeover), which keeps the table small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.spot.replay import Decider, Market, Mode, Observation, SpotJob

F = NDArray[np.float64]
#: The cost of missing the deadline. Finite so that expectations stay numbers (0 × ∞ is not);
#: with transition probabilities of at least 1e-6 any risky path still costs ≥ 1e9 dollars.
INF = 1e15

#: Actions stored in the table.
IDLE, SPOT, ON_DEMAND = 0, 1, 2

#: Age buckets (in changeovers) of an up or a down period: [0, 1), [1, 2), [2, 6), [6, ∞).
BUCKET_EDGES = (0.0, 1.0, 2.0, 6.0)
#: Prior: spot goes down 0.3 times per available hour (median of the six 1-node V100 traces)
#: and outages last half an hour on average; worth 12 hours of evidence.
PRIOR_DOWN_PER_HOUR = 0.3
PRIOR_UP_PER_HOUR = 2.0
PRIOR_HOURS = 12.0
HISTORY_DAYS = 7.0


@dataclass(frozen=True, slots=True)
class Availability:
    """A Markov chain over availability states (up/down × age bucket), per MDP step.

    ``transition[s, s']`` is the probability of moving from ``s`` to ``s'`` in one step;
    ``up[s]`` whether spot can be had in state ``s``.
    """

    transition: F
    up: NDArray[np.bool_]
    bucket_steps: tuple[float, ...]

    def state_of(self, up: bool, age_steps: float) -> int:
        """The state index for an up/down period of ``age_steps``."""
        b = sum(age_steps >= edge for edge in self.bucket_steps) - 1
        return (0 if up else len(self.bucket_steps)) + max(b, 0)


def _runs_with_ages(available: NDArray[np.bool_]) -> list[tuple[bool, int, bool]]:
    """(value, length, complete) of each run; the first and last runs are censored."""
    if len(available) == 0:
        return []
    edges = np.flatnonzero(np.diff(available.astype(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(available)]
    out = []
    for i in range(len(bounds) - 1):
        complete = 0 < i < len(bounds) - 2
        out.append((bool(available[bounds[i]]), bounds[i + 1] - bounds[i], complete))
    return out


def estimate_availability(
    available: NDArray[np.bool_], gap_hours: float, step_ticks: int, changeover_hours: float
) -> Availability:
    """Per-bucket end hazards from observed runs (exposure-based), shrunk towards the prior."""
    per_step = step_ticks * gap_hours
    edges_steps = tuple(e * changeover_hours / per_step for e in BUCKET_EDGES)
    nb = len(edges_steps)
    ends = np.zeros((2, nb))
    exposure = np.zeros((2, nb))
    for value, length, complete in _runs_with_ages(available):
        steps = length / step_ticks
        for b in range(nb):
            lo = edges_steps[b]
            hi = edges_steps[b + 1] if b + 1 < nb else math.inf
            exposure[int(value), b] += max(0.0, min(steps, hi) - lo)
            if complete and lo <= steps < hi:
                ends[int(value), b] += 1
    prior_rate = np.array([PRIOR_UP_PER_HOUR, PRIOR_DOWN_PER_HOUR]) * per_step  # per step
    prior_exposure = PRIOR_HOURS / per_step / nb
    hazard = (ends + prior_rate[:, None] * prior_exposure) / (exposure + prior_exposure)
    hazard = np.clip(hazard, 1e-6, 1 - 1e-6)
    n = 2 * nb
    t = np.zeros((n, n))
    for is_up in (0, 1):
        base = 0 if is_up else nb  # up states first
        other = nb if is_up else 0
        for b in range(nb):
            s = base + b
            h = hazard[is_up, b]
            width = (edges_steps[b + 1] - edges_steps[b]) if b + 1 < nb else math.inf
            advance = min(1.0, 1.0 / width) if math.isfinite(width) and width > 0 else 0.0
            t[s, other] = h  # the period ends: the other value, age 0
            t[s, s] = (1 - h) * (1 - advance)
            if advance:
                t[s, base + b + 1] = (1 - h) * advance
    up = np.array([True] * nb + [False] * nb)
    return Availability(t, up, edges_steps)


@dataclass(frozen=True, slots=True)
class Table:
    """Best action per (step, mode, availability state, lag): ``actions[e, m, s, q]``."""

    actions: NDArray[np.int8]
    step_ticks: int
    max_lag: int
    availability: Availability


def solve(
    work_steps: float,
    max_lag: int,
    changeover_steps: int,
    spot_cost: float,
    od_cost: float,
    avail: Availability,
    step_ticks: int,
) -> Table:
    """Backward induction over the MDP; costs are per step (price × step length)."""
    d = changeover_steps
    horizon = math.ceil(work_steps + max_lag) + 1
    size = max_lag + 1
    n = len(avail.up)
    up_idx = np.flatnonzero(avail.up)
    t = avail.transition
    t_d = np.linalg.matrix_power(t, d)
    t_uu = t[np.ix_(up_idx, up_idx)]
    t_u = t[up_idx]
    q = np.arange(size)
    inf_block = np.full((n, size), INF)
    actions = np.zeros((horizon, 3, n, size), dtype=np.int8)
    future: dict[int, tuple[F, F, F]] = {}  # e → (idle, spot, od) values, each n × size

    def shift(x: F, k: int) -> F:
        out = np.full_like(x, INF)
        if k < size:
            out[:, : size - k] = x[:, k:]
        return out

    def at(e: int) -> tuple[F, F, F]:
        return future.get(e, (inf_block, inf_block, inf_block))

    def spot_next(e: int) -> F:
        """Value of being in spot mode at e (lost where spot is down → idle)."""
        idle, spot, _ = at(e)
        return np.where(avail.up[:, None], spot, idle)

    for e in range(horizon - 1, -1, -1):
        done = q <= e - work_steps + 1 + 1e-9
        frac = work_steps - e + q
        idle_n, _, od_n = at(e + 1)
        idle_v = shift(t @ idle_n, 1)
        od_switch = d * od_cost + shift(t_d @ at(e + d)[2], d)
        od_run = np.where(done, od_cost * frac, od_cost + t @ od_n)
        # spot changeover begun in an up state: survives through step j or is lost at j
        switch_up = np.zeros((len(up_idx), size))
        surv = np.eye(len(up_idx))
        for j in range(1, d + 1):
            step = surv @ t_u  # distribution over all states at e + j
            lost = step.copy()
            lost[:, up_idx] = 0.0
            switch_up += lost @ shift(at(e + j)[0], j) + lost.sum(axis=1)[:, None] * j * spot_cost
            surv = surv @ t_uu
        switch_up += surv @ shift(spot_next(e + d)[up_idx], d) + surv.sum(axis=1)[:, None] * (
            d * spot_cost
        )
        spot_sw = np.full((n, size), INF)
        spot_sw[up_idx] = switch_up
        spot_run = np.where(done, spot_cost * frac, spot_cost + t @ spot_next(e + 1))
        spot_run[~avail.up] = INF
        values = []
        for mode, options in (
            (IDLE, (idle_v, spot_sw, od_switch)),
            (SPOT, (idle_v, spot_run, od_switch)),
            (ON_DEMAND, (idle_v, spot_sw, od_run)),
        ):
            stacked = np.stack(options)
            actions[e, mode] = stacked.argmin(axis=0)
            values.append(stacked.min(axis=0))
        future[e] = (values[0], values[1], values[2])
        future.pop(e + d + 1, None)
    return Table(actions, step_ticks, max_lag, avail)


@dataclass(frozen=True, slots=True)
class MdpDecider:
    """Reads the MDP table; a hard safety net keeps the deadline guarantee exact."""

    job: SpotJob
    table: Table
    start_tick: int

    def _availability_state(self, obs: Observation) -> int:
        t = self.table
        oldest = t.availability.bucket_steps[-1] * t.step_ticks + 2
        h = obs.history[-int(oldest) - 1 :]
        now = bool(h[-1])
        changes = np.flatnonzero(h[:-1] != h[1:])
        age_ticks = len(h) - 1 - int(changes[-1]) - 1 if len(changes) else len(h) - 1
        return t.availability.state_of(now, age_ticks / t.step_ticks)

    def decide(self, obs: Observation) -> Mode:
        """The table's action, overridden only where it would endanger the deadline."""
        d, g = self.job.changeover_hours, obs.gap_hours
        if obs.changeover_left_hours > 1e-9 and obs.mode is not Mode.IDLE:
            return obs.mode  # a changeover, once begun, runs to its end
        t = self.table
        e = (obs.tick - self.start_tick) // t.step_ticks
        if e >= t.actions.shape[0]:
            return Mode.ON_DEMAND
        lag = round((obs.elapsed_hours - obs.done_hours) / (t.step_ticks * g))
        mode_index = {Mode.IDLE: IDLE, Mode.SPOT: SPOT, Mode.ON_DEMAND: ON_DEMAND}[obs.mode]
        state = self._availability_state(obs)
        action = int(t.actions[e, mode_index, state, min(max(lag, 0), t.max_lag)])
        slack = obs.slack_hours
        if action == SPOT and (
            not obs.spot_available or (obs.mode is not Mode.SPOT and slack < 2 * d - 1e-9)
        ):
            action = ON_DEMAND
        if action == IDLE and slack < d + g - 1e-9:
            action = ON_DEMAND
        return (Mode.IDLE, Mode.SPOT, Mode.ON_DEMAND)[action]


class Default:
    """``default``: budgeteer's own policy — the MDP policy for the zone's observed
    availability, prepared on the history before the run, with the exact safety net."""

    name = "default"

    def prepare(self, job: SpotJob, history: Market) -> Decider:
        """Estimate availability, pick the step, solve."""
        start = len(history) - 1
        return MdpDecider(job, _table(job, history), start)


def _table(job: SpotJob, history: Market) -> Table:
    """The MDP table for ``job`` starting now, from ``history`` (everything up to now)."""
    g = history.gap_hours
    window = max(2, int(HISTORY_DAYS * 24 / g))
    d_ticks = max(1, round(job.changeover_hours / g))
    k = max(1, round(d_ticks / 4))
    step_h = k * g
    avail = estimate_availability(history.available[-window:], g, k, job.changeover_hours)
    price = float(history.spot_usd_per_hour[-1]) if len(history) else INF
    return solve(
        work_steps=job.work_hours / step_h,
        max_lag=max(0, math.floor((job.deadline_hours - job.work_hours) / step_h + 1e-9)),
        changeover_steps=max(1, round(job.changeover_hours / step_h)),
        spot_cost=price * step_h,
        od_cost=job.on_demand_usd_per_hour * step_h,
        avail=avail,
        step_ticks=k,
    )
