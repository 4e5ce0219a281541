"""Spot availability as a semi-Markov chain, estimated from observed up and down periods.

Spot is up or down, and how long it has been so (in age buckets, in units of the changeover)
changes the odds that it flips: short outages and flapping windows are common, long ones last.
The same estimate serves the replay benchmark, which cuts a trace's history into periods, and
the service, which learns each offering's periods online (:class:`MarketHistory`: launches that
succeed, launches refused for capacity, preemptions, and a backend's availability feed) and
keeps them in the store.

Estimation is exposure-based per age bucket — (periods that ended in the bucket) ÷ (time spent
in it) — shrunk towards a prior worth ``PRIOR_HOURS`` of evidence. Example: with one complete
6-minute outage and 10 hours up observed, the down hazard of the first bucket is about
(1 + prior) ÷ (0.1 h + prior exposure): far above the prior's 2 per hour, so a fresh outage is
expected to end soon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

F = NDArray[np.float64]

#: Age buckets (in changeovers) of an up or a down period: [0, 1), [1, 2), [2, 6), [6, ∞).
BUCKET_EDGES = (0.0, 1.0, 2.0, 6.0)
#: Prior: spot goes down 0.3 times per available hour (median of the six 1-node V100 traces)
#: and outages last half an hour on average; worth 12 hours of evidence.
PRIOR_DOWN_PER_HOUR = 0.3
PRIOR_UP_PER_HOUR = 2.0
PRIOR_HOURS = 12.0
#: How much history an estimate reads: four weeks (the replay's window; uptimes are long and
#: few, and a week of them made the hazards noisy — session 18 measured 7, 14, 28 days and all
#: of a trace: 1.0639, 1.0631, 1.0590, 1.0590 × optimal) …
HISTORY_DAYS = 28.0
#: … and, in the service, at most this many closed periods per offering (four weeks of the
#: busiest V100 trace is about 420).
MAX_PERIODS = 1000


@dataclass(frozen=True, slots=True)
class Period:
    """One stretch of spot being up (``up``) or down, ``hours`` long; ``complete`` when both
    its ends were seen (a period cut by the window or still going is censored)."""

    up: bool
    hours: float
    complete: bool


B = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PeriodColumns:
    """Periods as three columns (oldest first), for estimates without a pass over objects."""

    hours: F
    up: B
    complete: B

    @staticmethod
    def of(periods: tuple[Period, ...] | list[Period]) -> PeriodColumns:
        """The columns of ``periods``."""
        return PeriodColumns(
            np.array([p.hours for p in periods], dtype=np.float64),
            np.array([p.up for p in periods], dtype=np.bool_),
            np.array([p.complete for p in periods], dtype=np.bool_),
        )

    def then(self, period: Period, keep: int) -> PeriodColumns:
        """These columns with ``period`` appended, the oldest dropped beyond ``keep``."""
        return PeriodColumns(
            np.append(self.hours, period.hours)[-keep:],
            np.append(self.up, period.up)[-keep:],
            np.append(self.complete, period.complete)[-keep:],
        )

    def window(self, hours: float) -> PeriodColumns:
        """The newest periods that fit in ``hours``, the oldest of them cut to what is left and
        censored: the budget is taken off period by period, newest first, to the same floats as
        a loop would."""
        n = len(self.hours)
        # the budget left before each period, newest first, subtracted one by one
        left = np.subtract.accumulate(np.concatenate(([hours], self.hours[::-1])))[:n]
        out = np.flatnonzero(left <= 0)
        kept = int(out[0]) if len(out) else n
        if kept == n and (n == 0 or self.hours[0] <= left[n - 1]):
            return self
        first = n - kept
        cut = self.hours[first:].copy()
        complete = self.complete[first:].copy()
        if kept and cut[0] > left[kept - 1]:
            cut[0] = left[kept - 1]
            complete[0] = False
        return PeriodColumns(cut, self.up[first:], complete)


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

    def outage_steps(self) -> F:
        """The expected number of steps until spot is up again from each down state (the
        chain's mean time to leave its down states)."""
        nb = len(self.bucket_steps)
        q = self.transition[nb:, nb:]
        return np.asarray(np.linalg.solve(np.eye(nb) - q, np.ones(nb)), dtype=np.float64)

    def expected_outage_steps(self, age_steps: float, steps: F | None = None) -> float:
        """The expected number of steps until spot is up again, for an outage ``age_steps``
        old; ``steps``: :meth:`outage_steps`, when the caller keeps it."""
        by_state = self.outage_steps() if steps is None else steps
        return float(by_state[self.state_of(False, age_steps) - len(self.bucket_steps)])

    def key(self) -> bytes:
        """A fingerprint of the chain (memo keys)."""
        return self.transition.tobytes() + repr(self.bucket_steps).encode()


def periods_of(available: NDArray[np.bool_], gap_hours: float) -> tuple[Period, ...]:
    """The periods of a sampled availability series; the first and last are censored."""
    if len(available) == 0:
        return ()
    edges = np.flatnonzero(np.diff(available.astype(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(available)]
    out = []
    for i in range(len(bounds) - 1):
        complete = 0 < i < len(bounds) - 2
        length = bounds[i + 1] - bounds[i]
        out.append(Period(bool(available[bounds[i]]), length * gap_hours, complete))
    return tuple(out)


def estimate(
    periods: tuple[Period, ...] | list[Period], step_hours: float, changeover_hours: float
) -> Availability:
    """Per-bucket end hazards from ``periods`` (exposure-based), shrunk towards the prior, as a
    chain on steps of ``step_hours``; buckets in units of ``changeover_hours``."""
    return estimate_columns(PeriodColumns.of(periods), step_hours, changeover_hours)


def estimate_columns(
    columns: PeriodColumns, step_hours: float, changeover_hours: float
) -> Availability:
    """:func:`estimate` from periods kept as columns (the service's histories keep them so)."""
    edges_steps = tuple(e * changeover_hours / step_hours for e in BUCKET_EDGES)
    nb = len(edges_steps)
    ends = np.zeros((2, nb))
    exposure = np.zeros((2, nb))
    if len(columns.hours):
        steps = columns.hours / step_hours
        up = columns.up
        complete = columns.complete
        lo = np.array(edges_steps)[:, None]  # every bucket at once: bucket × period
        hi = np.array([*edges_steps[1:], math.inf])[:, None]
        inside = np.maximum(0.0, np.minimum(steps, hi) - lo)
        ended = complete & (lo <= steps) & (steps < hi)
        for side, mask in ((1, up), (0, ~up)):
            # summed in the periods' order (a cumulative sum, not numpy's pairwise sum):
            # the same floats as adding them one by one
            exposure[side] = np.cumsum(np.where(mask, inside, 0.0), axis=1)[:, -1]
            ends[side] = np.count_nonzero(ended & mask, axis=1)
    prior_rate = np.array([PRIOR_UP_PER_HOUR, PRIOR_DOWN_PER_HOUR]) * step_hours  # per step
    prior_exposure = PRIOR_HOURS / step_hours / nb
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


def estimate_availability(
    available: NDArray[np.bool_], gap_hours: float, step_ticks: int, changeover_hours: float
) -> Availability:
    """The chain for a sampled series (the replay's history), on steps of ``step_ticks``."""
    return estimate(periods_of(available, gap_hours), step_ticks * gap_hours, changeover_hours)


def mean_hours(periods: tuple[Period, ...], up: bool) -> float | None:
    """The mean length of complete periods of one kind (``None`` before any)."""
    lengths = [p.hours for p in periods if p.up is up and p.complete]
    return sum(lengths) / len(lengths) if lengths else None


@dataclass(frozen=True, slots=True)
class MarketHistory:
    """What the service has seen of one spot offering: its closed periods (oldest first, at
    most :data:`MAX_PERIODS`), whether spot is up now (``None``: never seen), since when, and
    whether that start was seen (a flip) or is only the first sighting (censored).

    Example: refused at 10:00, refused at 10:20, launched at 10:50, preempted at 13:50 →
    a down period of 50 min (its start is only the first sighting: censored), then an up
    period of 3 h (complete, both ends seen), and down since 13:50.
    """

    offering_id: str
    periods: tuple[Period, ...] = ()
    up: bool | None = None
    since: datetime | None = None
    seen_start: bool = False
    observations: int = 0
    #: ``periods`` as columns: derived on the first estimate, then carried from sighting to
    #: sighting (a flip appends to them)
    columns: PeriodColumns | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def recorded(offering_id: str, available: NDArray[np.bool_], gap_hours: float) -> MarketHistory:
        """A history from a recorded availability series of the offering's market (a trace of
        its zone, another deployment's): its periods, the newest :data:`MAX_PERIODS`, the
        series' first and last censored. Nothing is seen now (``up`` is ``None``): the
        service's first sighting begins the present, after them."""
        return MarketHistory(offering_id, periods_of(available, gap_hours)[-MAX_PERIODS:])

    def sampled(self, gap_hours: float, now: datetime) -> list[bool]:
        """The history as a sampled availability series on ticks of ``gap_hours`` (each period
        rounded to whole ticks, at least one; the current one up to ``now``): what
        :meth:`recorded` reads back, for another deployment to start from."""
        out: list[bool] = []
        current = () if self.up is None else (Period(self.up, self.age_hours(now), False),)
        for period in (*self.periods, *current):
            out.extend([period.up] * max(1, round(period.hours / gap_hours)))
        return out

    def _columns(self) -> PeriodColumns:
        columns = self.columns
        if columns is None:
            columns = PeriodColumns.of(self.periods)
            object.__setattr__(self, "columns", columns)  # derived from ``periods``: a memo
        return columns

    def observe(self, up: bool, at: datetime) -> MarketHistory:
        """Fold in one sighting at ``at`` (sightings arrive in time order; an earlier one than
        the current period's start is ignored)."""
        if self.since is not None and at < self.since:
            return self
        seen = self.observations + 1
        columns = self.columns
        if self.up is None or self.since is None:
            return MarketHistory(self.offering_id, self.periods, up, at, False, seen, columns)
        if up is self.up:  # (the constructor, not ``replace``: a sighting per offering a cycle)
            return MarketHistory(
                self.offering_id, self.periods, self.up, self.since, self.seen_start, seen, columns
            )
        hours = (at - self.since).total_seconds() / 3600.0
        closed = Period(self.up, hours, self.seen_start)
        periods = (*self.periods, closed)[-MAX_PERIODS:]
        if columns is not None:
            columns = columns.then(closed, MAX_PERIODS)
        return MarketHistory(self.offering_id, periods, up, at, True, seen, columns)

    def periods_until(self, now: datetime | None) -> tuple[Period, ...]:
        """The closed periods within the window, and the current one up to ``now`` (censored;
        left out when ``now`` is ``None``)."""
        w = self.window(now)
        return tuple(
            Period(u, h, c)
            for h, u, c in zip(w.hours.tolist(), w.up.tolist(), w.complete.tolist(), strict=True)
        )

    def window(self, now: datetime | None) -> PeriodColumns:
        """:meth:`periods_until` as columns: the newest closed periods that fit in
        :data:`HISTORY_DAYS` (the oldest of them cut to fit and censored), then the current one
        up to ``now``."""
        window = self._columns().window(HISTORY_DAYS * 24.0)
        if now is not None and self.up is not None and self.since is not None:
            window = window.then(Period(self.up, self.age_hours(now), False), len(window.hours) + 1)
        return window

    def last_uptime_hours(self) -> float | None:
        """How long the last closed up period lasted, when both its ends were seen (``None``
        when there is none, or its start was only a first sighting)."""
        for period in reversed(self.periods):
            if period.up:
                return period.hours if period.complete else None
        return None

    def age_hours(self, now: datetime) -> float:
        """How long the current state has lasted (0 when never seen)."""
        if self.since is None:
            return 0.0
        return max(0.0, (now - self.since).total_seconds() / 3600.0)

    def estimate(
        self, now: datetime | None, step_hours: float, changeover_hours: float
    ) -> Availability:
        """The chain from what was seen up to ``now`` (the prior alone before any sighting);
        from the closed periods alone when ``now`` is ``None`` (the same chain until the next
        flip, so decisions made meanwhile share their tables)."""
        return estimate_columns(self.window(now), step_hours, changeover_hours)
