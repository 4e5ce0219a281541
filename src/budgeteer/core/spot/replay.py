"""Replay one job against a spot availability trace, with exactly these semantics:

- Time runs in ticks of ``g`` hours. The job needs ``C`` hours of work and must finish within
  ``R`` hours of its start tick ``i0``; a changeover takes ``d`` hours.
- At the start of each tick ``i ≥ i0`` the policy picks ``idle``, ``spot`` or ``on_demand``;
  ``spot`` only if ``available[i] ≥ 1``.
- On spot, if ``available[i] == 0`` at the start of tick ``i``, the instance is lost before the
  policy decides (the mode becomes ``idle``; progress is kept: the job checkpoints, and the lost
  work is inside ``d``).
- Entering ``spot`` or ``on_demand`` from a different mode starts a changeover of ``d`` hours,
  billed at the new mode's price, without progress. ``idle`` costs nothing.
- Outside changeover, progress accrues one hour of work per hour held. Cost = price × hours held;
  the tick in which the work completes is billed pro rata. The deadline is met iff the
  completion time ≤ ``R``.

After the trace ends, spot counts as unavailable (on-demand still is). A run that has not
finished ``4 R`` hours after its start is reported unfinished.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from budgeteer.errors import BudgeteerError


class Mode(StrEnum):
    """What the job holds during a tick."""

    IDLE = "idle"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class SpotJob:
    """The job being replayed: ``C``, ``R``, ``d`` (hours) and the on-demand price."""

    work_hours: float
    deadline_hours: float
    changeover_hours: float
    on_demand_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class Market:
    """A replayed market: availability and spot price per tick, and the tick length."""

    available: NDArray[np.bool_]
    spot_usd_per_hour: NDArray[np.float64]
    gap_hours: float

    def __len__(self) -> int:
        return len(self.available)

    def until(self, tick: int) -> Market:
        """The market as observed up to and including ``tick`` (what an online policy may see)."""
        return Market(
            self.available[: tick + 1], self.spot_usd_per_hour[: tick + 1], self.gap_hours
        )


@dataclass(frozen=True, slots=True)
class Observation:
    """What a policy sees at the start of a tick: never anything after ``tick``.

    ``history`` is the availability from the trace start up to and including ``tick``;
    ``prices`` the spot price history likewise.
    """

    tick: int
    start_tick: int
    elapsed_hours: float
    done_hours: float
    mode: Mode
    changeover_left_hours: float
    spot_available: bool
    spot_usd_per_hour: float
    preemptions: int
    job: SpotJob
    gap_hours: float
    history: NDArray[np.bool_]
    prices: NDArray[np.float64]

    @property
    def remaining_work_hours(self) -> float:
        """Work still to do."""
        return self.job.work_hours - self.done_hours

    @property
    def remaining_time_hours(self) -> float:
        """Time until the deadline."""
        return self.job.deadline_hours - self.elapsed_hours

    @property
    def slack_hours(self) -> float:
        """Time to spare if the job ran without a break from now (changeover left included)."""
        return self.remaining_time_hours - self.remaining_work_hours - self.changeover_left_hours


class Decider(Protocol):
    """A policy prepared for one run: maps each tick's observation to a mode."""

    def decide(self, obs: Observation) -> Mode:
        """The mode for this tick; ``spot`` only when ``obs.spot_available``."""
        ...


class PolicyError(BudgeteerError):
    """A policy broke the replay contract (e.g. chose spot on an unavailable tick)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """One replayed run. ``decisions`` lists each tick where the chosen mode changed (the first
    tick always); ``finished_hours`` is ``None`` when the job never finished."""

    start_tick: int
    cost_usd: float
    finished_hours: float | None
    met_deadline: bool
    decisions: tuple[tuple[int, Mode], ...]
    preemptions: int
    spot_hours: float
    on_demand_hours: float


def available_at(market: Market, tick: int) -> bool:
    """Spot availability at ``tick`` (unavailable after the trace ends)."""
    return tick < len(market.available) and bool(market.available[tick])


def replay(market: Market, start_tick: int, job: SpotJob, decider: Decider) -> RunResult:
    """Run ``job`` from ``start_tick`` under ``decider``; see the module docstring."""
    g = market.gap_hours
    n = len(market)
    last_price = float(market.spot_usd_per_hour[-1])
    mode, changeover, done, elapsed, cost = Mode.IDLE, 0.0, 0.0, 0.0, 0.0
    spot_h = od_h = 0.0
    preemptions = 0
    decisions: list[tuple[int, Mode]] = []
    previous: Mode | None = None
    tick = start_tick
    while elapsed < 4 * job.deadline_hours:
        avail = available_at(market, tick)
        if mode is Mode.SPOT and not avail:
            mode, changeover = Mode.IDLE, 0.0
            preemptions += 1
        price_now = float(market.spot_usd_per_hour[tick]) if tick < n else last_price
        lo = min(tick + 1, n)
        obs = Observation(
            tick,
            start_tick,
            elapsed,
            done,
            mode,
            changeover,
            avail,
            price_now,
            preemptions,
            job,
            g,
            market.available[:lo],
            market.spot_usd_per_hour[:lo],
        )
        choice = decider.decide(obs)
        if choice is Mode.SPOT and not avail:
            raise PolicyError(f"policy chose spot at tick {tick}, where spot is unavailable")
        if choice is not previous:
            decisions.append((tick, choice))
            previous = choice
        if choice is not mode:
            changeover = job.changeover_hours if choice is not Mode.IDLE else 0.0
            mode = choice
        tick += 1
        if mode is Mode.IDLE:
            elapsed += g
            continue
        price = price_now if mode is Mode.SPOT else job.on_demand_usd_per_hour
        in_changeover = min(changeover, g)
        changeover -= in_changeover
        if changeover < 1e-12:  # d is usually whole ticks: drop float dust
            changeover = 0.0
        run = g - in_changeover
        need = job.work_hours - done
        finishing = run >= need
        held = in_changeover + need if finishing else g
        cost += price * held
        elapsed += held
        if mode is Mode.SPOT:
            spot_h += held
        else:
            od_h += held
        if finishing:
            return RunResult(
                start_tick,
                cost,
                elapsed,
                elapsed <= job.deadline_hours + 1e-9,
                tuple(decisions),
                preemptions,
                spot_h,
                od_h,
            )
        done += run
    return RunResult(start_tick, cost, None, False, tuple(decisions), preemptions, spot_h, od_h)


class ReplayDecisions:
    """A decider that follows a recorded ``decisions`` list (tick → mode from then on)."""

    def __init__(self, decisions: tuple[tuple[int, Mode], ...]) -> None:
        self._ticks = [t for t, _ in decisions]
        self._modes = [m for _, m in decisions]

    def decide(self, obs: Observation) -> Mode:
        """The latest recorded mode at or before this tick."""
        k = bisect.bisect_right(self._ticks, obs.tick) - 1
        return self._modes[k] if k >= 0 else Mode.IDLE
