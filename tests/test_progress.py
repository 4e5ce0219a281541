"""Runtime control from progress (pure): rate, ETA, deadline risk, rules, early stop."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from budgeteer.core.progress import (
    Sample,
    Trend,
    behind_schedule,
    eta,
    loss_stalled,
    rule_fires,
    step_rate_per_second,
)
from budgeteer.domain.job import SwitchRule

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def _samples(*pairs: tuple[float, int], total: int = 1000) -> list[Sample]:
    return [Sample(T0 + timedelta(seconds=s), step, total) for s, step in pairs]


def test_rate_is_smoothed_and_eta_follows() -> None:
    steady = _samples((0, 0), (10, 100), (20, 200))
    assert step_rate_per_second(steady) == 10
    assert eta(steady) == T0 + timedelta(seconds=20 + 800 / 10)
    slowing = _samples((0, 0), (10, 100), (20, 110))  # 10/s then 1/s → 0.3·1 + 0.7·10
    assert step_rate_per_second(slowing) == 0.3 * 1 + 0.7 * 10
    assert step_rate_per_second(_samples((0, 5))) is None
    assert eta([]) is None


def test_a_trend_adds_one_sample_at_a_time_to_the_same_rate() -> None:
    # a long attempt: alternating 5/s and 15/s, with a report that made no progress in between
    pairs = [(0.0, 0)]
    for i in range(1, 500):
        pairs.append((pairs[-1][0] + 10, pairs[-1][1] + (50 if i % 2 else 150)))
    pairs.insert(200, (pairs[199][0] + 5, pairs[199][1]))  # no progress: the rate is kept
    samples = _samples(*pairs, total=10**6)
    trend = Trend()
    expected: float | None = None
    for a, b in itertools.pairwise(samples):
        trend = trend.add(a) if trend.last is None else trend
        trend = trend.add(b)
        if b.step > a.step:
            rate = (b.step - a.step) / (b.at - a.at).total_seconds()
            expected = rate if expected is None else 0.3 * rate + 0.7 * expected
        assert trend.rate_per_second == expected
    assert Trend.of(samples) == trend
    assert trend.last == samples[-1]
    assert trend.eta() == eta(samples)


def test_behind_schedule_uses_the_margin() -> None:
    s = _samples((0, 0), (10, 100))  # finishes at T0 + 100 s
    assert not behind_schedule(s, T0 + timedelta(seconds=200), timedelta(seconds=50))
    assert behind_schedule(s, T0 + timedelta(seconds=120), timedelta(seconds=50))
    assert not behind_schedule(s, None, timedelta(0))


def test_switch_rule_after_90_minutes_under_half() -> None:
    rule = SwitchRule(1.5, 0.5)
    s = _samples((0, 0), (10, 400))
    assert rule_fires([rule], T0, T0 + timedelta(minutes=89), s[-1]) is None
    assert rule_fires([rule], T0, T0 + timedelta(minutes=91), s[-1]) is rule
    assert rule_fires([rule], T0, T0 + timedelta(minutes=91), _samples((0, 600))[-1]) is None


def test_loss_stall_detection() -> None:
    assert not loss_stalled([1.0, 0.9, 0.8], 0.01, 3)  # not enough reports
    assert not loss_stalled([1.0, 0.9, 0.8, 0.7], 0.05, 2)
    assert loss_stalled([1.0, 0.5, 0.499, 0.498], 0.01, 2)
