"""Runtime control from progress reports (pure): ETA, deadline risk, switch rules, early stop.

The supervisor records, at each cycle, the latest step it has seen for a running attempt with
the scheduler's clock time (so a time-scaled clock and the job's own clock cannot disagree).
From those observations: a smoothed step rate (exponentially weighted), the ETA, whether the
job will miss its deadline (minus a margin) on its current market, whether a switch rule fires,
and whether a stalled loss calls for an early stop.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from budgeteer.domain.job import SwitchRule

RATE_SMOOTHING = 0.3  # weight of the newest rate sample
RATE_WINDOW = 64  # samples looked at (0.7^63 ≈ 2e-10: the rest is below float noise)


@dataclass(frozen=True, slots=True)
class Sample:
    """The job had done ``step`` of ``total`` steps at ``at`` (scheduler clock)."""

    at: datetime
    step: int
    total: int


def step_rate_per_second(samples: Sequence[Sample]) -> float | None:
    """Exponentially smoothed steps per second between consecutive samples (``None`` until
    two samples with progress exist)."""
    rate: float | None = None
    # older samples weigh (1 − RATE_SMOOTHING)^k: beyond the last RATE_WINDOW they do not count
    for a, b in itertools.pairwise(samples[-RATE_WINDOW:]):
        seconds = (b.at - a.at).total_seconds()
        if seconds <= 0 or b.step <= a.step:
            continue
        sample = (b.step - a.step) / seconds
        rate = sample if rate is None else RATE_SMOOTHING * sample + (1 - RATE_SMOOTHING) * rate
    return rate


def eta(samples: Sequence[Sample]) -> datetime | None:
    """When the job should finish at the smoothed rate, or ``None`` if unknown."""
    rate = step_rate_per_second(samples)
    if rate is None or not samples:
        return None
    last = samples[-1]
    return last.at + timedelta(seconds=max(0, last.total - last.step) / rate)


def behind_schedule(
    samples: Sequence[Sample], deadline: datetime | None, margin: timedelta
) -> bool:
    """True when the ETA passes the deadline minus ``margin``."""
    finish = eta(samples)
    return deadline is not None and finish is not None and finish > deadline - margin


def rule_fires(
    rules: Sequence[SwitchRule], started: datetime, now: datetime, samples: Sequence[Sample]
) -> SwitchRule | None:
    """The first switch rule whose condition holds (progress from the latest sample)."""
    if not samples:
        return None
    done = samples[-1].step / samples[-1].total if samples[-1].total else 0.0
    hours = (now - started).total_seconds() / 3600
    return next((r for r in rules if hours >= r.after_hours and done < r.if_progress_below), None)


def loss_stalled(losses: Sequence[float], min_delta: float, patience: int) -> bool:
    """True when none of the last ``patience`` losses improved on the best before them by at
    least ``min_delta``."""
    if len(losses) <= patience:
        return False
    best_before = min(losses[:-patience])
    return min(losses[-patience:]) > best_before - min_delta
