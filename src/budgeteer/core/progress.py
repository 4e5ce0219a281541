"""Runtime control from progress reports (pure): ETA, deadline risk, switch rules, early stop.

The supervisor records, at each cycle, the latest step it has seen for a running attempt with
the scheduler's clock time (so a time-scaled clock and the job's own clock cannot disagree).
From those observations: a smoothed step rate (exponentially weighted), the ETA, whether the
job will miss its deadline (minus a margin) on its current market, whether a switch rule fires,
and whether a stalled loss calls for an early stop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from budgeteer.domain.job import SwitchRule
from budgeteer.domain.progress import parse_progress

RATE_SMOOTHING = 0.3  # weight of the newest rate sample


@dataclass(frozen=True, slots=True)
class Sample:
    """The job had done ``step`` of ``total`` steps at ``at`` (scheduler clock)."""

    at: datetime
    step: int
    total: int


@dataclass(frozen=True, slots=True)
class Trend:
    """Progress seen so far, folded one sample at a time: the latest sample and the smoothed
    step rate — O(1) per sample however long an attempt runs (the supervisor keeps one per
    running attempt and adds each new sample)."""

    last: Sample | None = None
    rate_per_second: float | None = None  # None until two samples with progress exist

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> Trend:
        trend = cls()
        for sample in samples:
            trend = trend.add(sample)
        return trend

    def add(self, sample: Sample) -> Trend:
        """The trend with ``sample`` seen next: the rate between consecutive samples, smoothed
        exponentially (the newest weighs :data:`RATE_SMOOTHING`); a pair without progress or
        time between them leaves the rate as it was."""
        a, rate = self.last, self.rate_per_second
        if a is not None:
            seconds = (sample.at - a.at).total_seconds()
            if seconds > 0 and sample.step > a.step:
                new = (sample.step - a.step) / seconds
                rate = new if rate is None else RATE_SMOOTHING * new + (1 - RATE_SMOOTHING) * rate
        return Trend(sample, rate)

    def eta(self) -> datetime | None:
        """When the job should finish at the smoothed rate, or ``None`` if unknown."""
        last, rate = self.last, self.rate_per_second
        if rate is None or last is None:
            return None
        return last.at + timedelta(seconds=max(0, last.total - last.step) / rate)

    def behind(self, deadline: datetime | None, margin: timedelta) -> bool:
        """True when the ETA passes the deadline minus ``margin``."""
        finish = self.eta()
        return deadline is not None and finish is not None and finish > deadline - margin


def step_rate_per_second(samples: Iterable[Sample]) -> float | None:
    """Exponentially smoothed steps per second between consecutive samples (``None`` until
    two samples with progress exist)."""
    return Trend.of(samples).rate_per_second


def eta(samples: Iterable[Sample]) -> datetime | None:
    """When the job should finish at the smoothed rate, or ``None`` if unknown."""
    return Trend.of(samples).eta()


def behind_schedule(
    samples: Iterable[Sample], deadline: datetime | None, margin: timedelta
) -> bool:
    """True when the ETA passes the deadline minus ``margin``."""
    return Trend.of(samples).behind(deadline, margin)


def rule_fires(
    rules: Sequence[SwitchRule], started: datetime, now: datetime, last: Sample | None
) -> SwitchRule | None:
    """The first switch rule whose condition holds (progress from the ``last`` sample)."""
    if last is None:
        return None
    done = last.step / last.total if last.total else 0.0
    hours = (now - started).total_seconds() / 3600
    return next((r for r in rules if hours >= r.after_hours and done < r.if_progress_below), None)


def loss_stalled(losses: Sequence[float], min_delta: float, patience: int) -> bool:
    """True when none of the last ``patience`` losses improved on the best before them by at
    least ``min_delta``."""
    if len(losses) <= patience:
        return False
    best_before = min(losses[:-patience])
    return min(losses[-patience:]) > best_before - min_delta


def samples_of(
    reports: Iterable[tuple[datetime, Mapping[str, object]] | _Report],
    since: datetime | None = None,
) -> list[Sample]:
    """The step samples of progress reports (``(at, record)`` pairs, or records with ``at``
    and ``record``) sent at or after ``since``: each record parsed by
    :func:`~budgeteer.domain.progress.parse_progress`, only those whose step advanced kept."""
    out: list[Sample] = []
    for report in reports:
        at, record = report if isinstance(report, tuple) else (report.at, report.record)
        if since is not None and at < since:
            continue
        p = parse_progress(record)
        if p.step is None or p.total_steps is None:
            continue
        if not out or p.step > out[-1].step:
            out.append(Sample(at, p.step, p.total_steps))
    return out


class _Report(Protocol):
    """A stored progress report (as :class:`budgeteer.store.base.ProgressReport`)."""

    @property
    def at(self) -> datetime: ...

    @property
    def record(self) -> Mapping[str, object]: ...
