"""The one spot decider: replay, simulator and service ask it the same question.

Each time it is asked — every tick of a replay, every cycle of the service for every job that
may run on spot — it reads a :class:`Situation` and answers a :class:`Decision`: hold spot,
hold on-demand, or wait (``idle``). From where the job stands that means wait for spot, take
on-demand now, stay, or move back to spot.

A situation is made of an *epoch* and a position in it. An epoch starts when a job's plan is
made: ``work_hours`` (C) is the work left then on the placement's speed, ``deadline_hours`` (R)
the time left to its deadline, ``changeover_hours`` (d) what a switch costs (checkpoint and
restart), and the prices. The MDP of :mod:`budgeteer.core.spot.mdp` is solved once per epoch and
market estimate (memoised by the caller's :class:`TableMemo`), and each decision looks up the
table at the position (elapsed, done, mode, spot up or down and for how long). The replay runs
one epoch per run; the service starts a new one when the estimate or the plan moved. An exact
safety net sits on top: never a spot changeover with less than 2d of slack, never a wait with
less than d + one tick — so a job that on-demand from the start could finish never misses. Beside
it the *flicker hold* keeps a job on on-demand while spot repeats a short uptime (the last one,
and this one so far, under :data:`FLICKER_CHANGEOVERS` changeovers): short uptimes come in runs,
which the chain cannot see. And a job waiting for spot takes a spot that has been up
:data:`PROVEN_CHANGEOVERS` changeovers, even where the chain would wait longer.

Example: C = 4 h, R = 6 h, d = 0.2 h, spot down for 10 min in a market whose outages are short:
``idle`` ("wait for spot: down 10 min, slack 2.0 h"); the same job with 0.35 h of slack left:
``on_demand`` ("slack 0.35 h no longer covers a wait").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.spot.estimate import HISTORY_DAYS, Availability, estimate_availability
from budgeteer.core.spot.mdp import IDLE, INF, ON_DEMAND, SPOT, Table, solve
from budgeteer.core.spot.replay import Decider, Market, Mode, Observation, SpotJob

#: The table of an epoch is cut at this many steps (the step grows for longer epochs).
MAX_STEPS = 4000
#: The flicker hold, in changeovers: a job on on-demand does not move back to spot while the
#: spot is younger than this, when spot's last uptime was shorter than this too. Short uptimes
#: come in runs on every trace of the suite (``benchmarks/spot_market_stats.py``), which the
#: semi-Markov chain, forgetting everything at a flip, cannot see.
FLICKER_CHANGEOVERS = 2.0
#: A job waiting for spot takes it once spot has been up this many changeovers (counting the
#: tick it is seen in), even where the chain would wait on: estimated on four weeks, the chain
#: can make a young spot look so likely to die that waiting out its first hour saves a
#: changeover's money, and the slack that waiting burns is what a later long outage needs
#: (session 31, ``benchmarks/README.md``: 1.0576 → 1.0564 × optimal).
PROVEN_CHANGEOVERS = 2.0
#: A market's estimate is taken up again once it has seen this share more periods (and two
#: more) than the estimate in use — in the replay as in the service.
REESTIMATE_GROWTH = 0.25


def estimate_moved(periods_then: int, periods_now: int) -> bool:
    """Whether a market that had ``periods_then`` periods when its estimate was made has seen
    enough since (``periods_now``) to estimate it again."""
    return periods_now >= periods_then * (1 + REESTIMATE_GROWTH) + 2


_MODES = (Mode.IDLE, Mode.SPOT, Mode.ON_DEMAND)
_INDEX = {Mode.IDLE: IDLE, Mode.SPOT: SPOT, Mode.ON_DEMAND: ON_DEMAND}


@dataclass(frozen=True, slots=True)
class Situation:
    """What one spot decision reads (hours throughout; see the module docstring).

    The epoch: ``work_hours`` (C), ``deadline_hours`` (R), ``changeover_hours`` (d), the spot
    and on-demand prices per hour. The position: ``elapsed_hours`` and ``done_hours`` since the
    epoch began, the ``mode`` held now and the changeover still to run in it, whether spot can
    be had now and for how long it has been so. ``tick_hours``: how often decisions are made
    (a trace's tick; the service's cycle), which sets the MDP's step. ``last_uptime_hours``:
    how long spot's last closed uptime lasted, when both its ends were seen (``None``: not
    known) — read by the flicker hold (:data:`FLICKER_CHANGEOVERS`).
    """

    work_hours: float
    deadline_hours: float
    changeover_hours: float
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    elapsed_hours: float
    done_hours: float
    mode: Mode
    changeover_left_hours: float
    spot_up: bool
    spot_age_hours: float
    tick_hours: float
    last_uptime_hours: float | None = None

    @property
    def slack_hours(self) -> float:
        """Time to spare if the job ran without a break from now (changeover left included)."""
        left = self.deadline_hours - self.elapsed_hours
        return left - (self.work_hours - self.done_hours) - self.changeover_left_hours


@dataclass(frozen=True, slots=True)
class Decision:
    """The mode to hold, and why: :attr:`reason` gives the numbers behind it (built only when
    read — the replay asks thousands of times a run)."""

    mode: Mode
    situation: Situation
    netted: str = ""

    @property
    def slack_hours(self) -> float:
        """The slack the decision was made with."""
        return self.situation.slack_hours

    @property
    def reason(self) -> str:
        """The decision in words, with the situation's numbers."""
        return _why(self.situation, self.mode) + self.netted


def step_ticks(changeover_hours: float, tick_hours: float, work_hours: float, lag: float) -> int:
    """Trace ticks per MDP step: about a quarter of a changeover, coarser for long epochs."""
    d_ticks = max(1, round(changeover_hours / tick_hours))
    k = max(1, round(d_ticks / 4))
    while (work_hours + lag) / (k * tick_hours) > MAX_STEPS:
        k *= 2
    return k


class TableMemo:
    """Solved tables by epoch and estimate, least recently used dropped beyond ``size``
    (owned by the caller: one per replayed run, one per scheduler)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._tables: OrderedDict[tuple[object, ...], Table] = OrderedDict()
        self.solves = 0

    def table(self, s: Situation, availability: Availability, k: int) -> Table:
        """The MDP table for the situation's epoch (solved on first use)."""
        key = (
            s.work_hours,
            s.deadline_hours,
            s.changeover_hours,
            s.spot_usd_per_hour,
            s.on_demand_usd_per_hour,
            s.tick_hours,
            k,
            availability.key(),
        )
        found = self._tables.get(key)
        if found is not None:
            self._tables.move_to_end(key)
            return found
        step_h = k * s.tick_hours
        table = solve(
            work_steps=s.work_hours / step_h,
            max_lag=max(0, math.floor((s.deadline_hours - s.work_hours) / step_h + 1e-9)),
            changeover_steps=max(1, round(s.changeover_hours / step_h)),
            spot_cost=s.spot_usd_per_hour * step_h if s.spot_usd_per_hour < INF else INF,
            od_cost=s.on_demand_usd_per_hour * step_h,
            avail=availability,
            step_ticks=k,
        )
        self.solves += 1
        self._tables[key] = table
        if len(self._tables) > self.size:
            self._tables.popitem(last=False)
        return table


def decide(s: Situation, availability: Availability, memo: TableMemo) -> Decision:
    """The mode to hold now (see the module docstring)."""
    slack = s.slack_hours
    d, g = s.changeover_hours, s.tick_hours
    if s.changeover_left_hours > 1e-9 and s.mode is not Mode.IDLE:
        return Decision(s.mode, s, "; a changeover is under way")
    k = step_ticks(d, g, s.work_hours, max(0.0, s.deadline_hours - s.work_hours))
    table = memo.table(s, availability, k)
    step_h = k * g
    e = math.floor(s.elapsed_hours / step_h + 1e-9)
    if e >= table.actions.shape[0]:
        return Decision(Mode.ON_DEMAND, s, "; past the plan's horizon")
    lag = round((s.elapsed_hours - s.done_hours) / step_h)
    state = availability.state_of(s.spot_up, s.spot_age_hours / step_h)
    action = int(table.actions[e, _INDEX[s.mode], state, min(max(lag, 0), table.max_lag)])
    netted = ""
    if action == SPOT and (not s.spot_up or (s.mode is not Mode.SPOT and slack < 2 * d - 1e-9)):
        action = ON_DEMAND
        netted = "; safety net: the slack is below two changeovers"
    elif action == SPOT and s.mode is Mode.ON_DEMAND and _flickering(s):
        action = ON_DEMAND
        netted = (
            f"; flicker hold: spot's last uptime lasted {(s.last_uptime_hours or 0.0) * 60:.0f} "
            f"min, so on-demand is kept until this one has lasted "
            f"{FLICKER_CHANGEOVERS * d * 60:.0f} min (counting this tick)"
        )
    if action == IDLE and _proven(s) and slack >= 2 * d - 1e-9:
        action = SPOT
        netted = (
            f"; spot proven: up {s.spot_age_hours * 60:.0f} min, "
            f"{PROVEN_CHANGEOVERS * d * 60:.0f} min or more counting this tick, so a waiting "
            "job takes it"
        )
    if action == IDLE and slack < d + g - 1e-9:
        action = ON_DEMAND
        netted = "; safety net: the slack is below a changeover and a tick"
    return Decision(_MODES[action], s, netted)


def _lasted(s: Situation, changeovers: float) -> bool:
    """Whether spot, up now, has been up ``changeovers`` changeovers or more, counting the tick
    it is seen in — the one way both rules beside the MDP count spot's age."""
    return s.spot_up and s.spot_age_hours + s.tick_hours >= changeovers * s.changeover_hours - 1e-9


def _flickering(s: Situation) -> bool:
    """Whether spot is in a run of short uptimes: the last one, and this one so far (counting
    the tick it is seen in), shorter than :data:`FLICKER_CHANGEOVERS` changeovers."""
    last = s.last_uptime_hours
    return (
        s.spot_up
        and last is not None
        and last < FLICKER_CHANGEOVERS * s.changeover_hours - 1e-9
        and not _lasted(s, FLICKER_CHANGEOVERS)
    )


def _proven(s: Situation) -> bool:
    """Whether a waiting job sees spot up for :data:`PROVEN_CHANGEOVERS` changeovers or more
    (counting the tick it is seen in)."""
    return s.mode is Mode.IDLE and _lasted(s, PROVEN_CHANGEOVERS)


def _why(s: Situation, mode: Mode) -> str:
    spot = "up" if s.spot_up else "down"
    state = f"spot {spot} {s.spot_age_hours * 60:.0f} min, slack {s.slack_hours:.2f} h"
    prices = (
        f"spot ${s.spot_usd_per_hour:.2f}/h vs on-demand ${s.on_demand_usd_per_hour:.2f}/h, "
        f"changeover {s.changeover_hours * 60:.0f} min"
    )
    if mode is Mode.IDLE:
        verb = "wait for spot"
    elif mode is Mode.SPOT:
        verb = "stay on spot" if s.mode is Mode.SPOT else "move to spot"
    else:
        verb = "stay on on-demand" if s.mode is Mode.ON_DEMAND else "take on-demand now"
    return f"{verb} ({state}; {prices})"


class Default:
    """``default``: budgeteer's own policy — the MDP policy for the zone's observed
    availability, with the exact safety net: the replay's side of :func:`decide`. The estimate
    is made on the four weeks before the run (:data:`HISTORY_DAYS`) and made again, on the four
    weeks before the tick, whenever the market has seen a quarter more periods
    (:func:`estimate_moved`, the service's rule)."""

    name = "default"

    def prepare(self, job: SpotJob, history: Market) -> Decider:
        """Estimate availability on the history's last four weeks, at the run's start price."""
        g = history.gap_hours
        window = max(2, int(HISTORY_DAYS * 24 / g))
        lag = max(0.0, job.deadline_hours - job.work_hours)
        k = step_ticks(job.changeover_hours, g, job.work_hours, lag)
        seen = history.available[-window:]
        availability = estimate_availability(seen, g, k, job.changeover_hours)
        price = float(history.spot_usd_per_hour[-1]) if len(history) else INF
        return ReplayDecider(job, availability, price, k, TableMemo(size=2), window, _flips(seen))


def last_uptime_ticks(available: NDArray[np.bool_]) -> int | None:
    """How many ticks the last up run before the current run of a sampled availability
    series lasted, when both its ends are in the series (``None`` when none is)."""
    n = len(available)
    if n == 0:
        return None
    span = 512
    while True:
        seen = available[-span:]
        changes = np.flatnonzero(seen[:-1] != seen[1:])
        before = 3 if seen[-1] else 2  # changes back to the start of the up run before
        if len(changes) >= before:
            return int(changes[-before + 1] - changes[-before])
        if span >= n:
            return None
        span *= 4


def _flips(available: NDArray[np.bool_]) -> int:
    """How many times a sampled availability series changed (its closed periods)."""
    return int(np.count_nonzero(available[1:] != available[:-1]))


@dataclass(slots=True)
class ReplayDecider:
    """Turns each replay observation into a :class:`Situation` and asks :func:`decide`;
    estimates the market again from the last ``window`` ticks when it moved (``periods``: the
    flips the estimate in use was made from)."""

    job: SpotJob
    availability: Availability
    spot_usd_per_hour: float
    step_ticks: int
    memo: TableMemo
    window: int = 0
    periods: int = 0

    def situation(self, obs: Observation) -> Situation:
        """The observation as the decider's input (one epoch: the whole run)."""
        oldest = self.availability.bucket_steps[-1] * self.step_ticks + 2
        h = obs.history[-int(oldest) - 1 :]
        changes = np.flatnonzero(h[:-1] != h[1:])
        age_ticks = len(h) - 1 - int(changes[-1]) - 1 if len(changes) else len(h) - 1
        last = last_uptime_ticks(obs.history[-self.window :] if self.window else obs.history)
        return Situation(
            work_hours=self.job.work_hours,
            deadline_hours=self.job.deadline_hours,
            changeover_hours=self.job.changeover_hours,
            spot_usd_per_hour=self.spot_usd_per_hour,
            on_demand_usd_per_hour=self.job.on_demand_usd_per_hour,
            elapsed_hours=obs.elapsed_hours,
            done_hours=obs.done_hours,
            mode=obs.mode,
            changeover_left_hours=obs.changeover_left_hours,
            spot_up=obs.spot_available,
            spot_age_hours=age_ticks * obs.gap_hours,
            tick_hours=obs.gap_hours,
            last_uptime_hours=None if last is None else last * obs.gap_hours,
        )

    def decide(self, obs: Observation) -> Mode:
        """The decider's mode for this tick (the estimate made again first if it moved)."""
        if self.window:
            seen = obs.history[-self.window :]
            flips = _flips(seen)
            if estimate_moved(self.periods, flips):
                self.availability = estimate_availability(
                    seen, obs.gap_hours, self.step_ticks, self.job.changeover_hours
                )
                self.periods = flips
        return decide(self.situation(obs), self.availability, self.memo).mode
