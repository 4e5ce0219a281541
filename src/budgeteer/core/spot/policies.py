"""Online spot policies: decide each tick from what has been observed so far, never the future.

Each policy is prepared once per run (``prepare(job, history)``, where ``history`` is the market
up to the start tick) and returns a :class:`Decider`. Every policy here keeps the guarantee that
it never misses a deadline that on-demand from the start could meet, as long as the changeover
is at least one tick long: it never lets the slack fall below what one more changeover needs.

Example event sequences (C = work, R = deadline, d = changeover, all in hours; slack = R − t − C
remaining − changeover left):

- ``greedy``: spot available → spot; unavailable → idle; once slack < 2d while not on spot → on
  demand for good. With C = 10, R = 12, d = 0.2: an outage from t = 3 to t = 5.5 is waited out
  (slack 2 → idle burns it to 0.4 − … < 0.4 = 2d at t ≈ 4.6), so it goes on-demand at t ≈ 4.6
  and stays there to the end even though spot came back at 5.5.
- ``uniform-progress``: keeps done work near the uniform line C·t/R: idle and behind → on-demand,
  and on-demand until ahead of the line 2d from now (hysteresis); spot whenever available.
- ``default``: see :mod:`budgeteer.core.spot.mdp`.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgeteer.core.spot.replay import Decider, Market, Mode, Observation, SpotJob


def _guard(obs: Observation) -> bool:
    """True when the slack no longer covers a spot attempt plus a later fallback (2d)."""
    return obs.slack_hours < 2 * obs.job.changeover_hours - 1e-9


class OnDemand:
    """Always on-demand: the baseline every saving is measured against."""

    name = "on-demand"

    def prepare(self, job: SpotJob, history: Market) -> Decider:
        """No state needed."""
        return self

    def decide(self, obs: Observation) -> Mode:
        """On-demand, always."""
        return Mode.ON_DEMAND


class Greedy:
    """Spot whenever available, otherwise wait; Safety Net: once the remaining time is below
    remaining work + 2 × changeover (and the job is not on spot), on-demand for good."""

    name = "greedy"

    def prepare(self, job: SpotJob, history: Market) -> Decider:
        """No state needed."""
        return self

    def decide(self, obs: Observation) -> Mode:
        """See the class docstring."""
        if obs.mode is Mode.ON_DEMAND:
            return Mode.ON_DEMAND  # only the safety net leads here: stay for good
        if obs.mode is Mode.SPOT:
            return Mode.SPOT
        if obs.remaining_time_hours < obs.remaining_work_hours + 2 * obs.job.changeover_hours:
            return Mode.ON_DEMAND
        return Mode.SPOT if obs.spot_available else Mode.IDLE


@dataclass(frozen=True, slots=True)
class UniformProgress:
    """The paper's Uniform Progress, with its four rules:

    1. idle and behind the uniform line ``C·t/R`` → on-demand, to catch up;
    2. spot whenever available (even when behind), kept until preempted;
    3. hysteresis: on on-demand, stay until progress ≥ the line at ``t + 2d``;
    4. safety net: idle (or about to leave on-demand) with remaining time < remaining work + 2d
       → on-demand until the end.
    """

    name: str = "uniform-progress"

    def prepare(self, job: SpotJob, history: Market) -> Decider:
        """No state needed."""
        return self

    def decide(self, obs: Observation) -> Mode:
        """See the class docstring."""
        job, d = obs.job, obs.job.changeover_hours
        rate = job.work_hours / job.deadline_hours
        if obs.mode is Mode.SPOT:
            return Mode.SPOT
        if _guard(obs):  # safety net: remaining time < remaining work + 2d
            return Mode.ON_DEMAND
        if obs.mode is Mode.ON_DEMAND and obs.done_hours < rate * (obs.elapsed_hours + 2 * d):
            return Mode.ON_DEMAND
        if obs.spot_available:
            return Mode.SPOT
        if obs.done_hours < rate * obs.elapsed_hours:
            return Mode.ON_DEMAND
        return Mode.IDLE
