"""The simulator's event kernel: ordering by (time, priority, seq), ties, cancellation,
determinism (the same seed gives the same event log), and the SimClock on top."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgeteer.clock import Clock
from budgeteer.sim import Kernel, SimClock
from budgeteer.sim.kernel import PastEvent

T0 = datetime(2026, 10, 1, tzinfo=UTC)


def test_events_run_by_time_then_priority_then_scheduling_order() -> None:
    k = Kernel(T0)
    seen: list[str] = []
    later = T0 + timedelta(hours=1)
    k.schedule(later, lambda: seen.append("cycle"), priority=5, label="cycle")
    k.schedule(later, lambda: seen.append("market-1"), priority=0, label="market-1")
    k.schedule(later, lambda: seen.append("market-2"), priority=0, label="market-2")
    k.schedule(T0 + timedelta(minutes=1), lambda: seen.append("arrival"), label="arrival")
    assert k.run() == 4
    assert seen == ["arrival", "market-1", "market-2", "cycle"]
    assert k.now == later
    assert [label for *_, label in k.log] == seen


def test_events_scheduled_while_running_take_part_and_run_until_stops_on_time() -> None:
    k = Kernel(T0)
    seen: list[datetime] = []

    def tick() -> None:
        seen.append(k.now)
        k.after(600, tick, label="tick")  # every ten minutes, forever

    k.schedule(T0, tick, label="tick")
    assert k.run(until=T0 + timedelta(hours=1)) == 7  # 0, 10, …, 60 minutes
    assert seen[-1] == T0 + timedelta(hours=1)
    assert k.now == T0 + timedelta(hours=1)
    assert k.peek() == T0 + timedelta(minutes=70)
    k.run(until=T0 + timedelta(minutes=75))
    assert k.now == T0 + timedelta(minutes=75)  # time moves to `until` even between events


def test_cancelled_events_neither_run_nor_log_and_the_past_is_refused() -> None:
    k = Kernel(T0)
    seen: list[str] = []
    doomed = k.after(60, lambda: seen.append("doomed"), label="doomed")
    k.after(120, lambda: seen.append("kept"), label="kept")
    k.cancel(doomed)
    k.run()
    assert seen == ["kept"]
    assert [label for *_, label in k.log] == ["kept"]
    with pytest.raises(PastEvent, match="late"):
        k.schedule(T0, lambda: None, label="late")


def _story(seed: int) -> list[tuple[datetime, int, int, str]]:
    """A random but seeded workload: arrivals that spawn completions and retries."""
    rng = np.random.default_rng(seed)
    k = Kernel(T0)

    def arrive(i: int) -> None:
        k.after(float(rng.exponential(3600)), lambda: done(i), priority=1, label=f"done-{i}")

    def done(i: int) -> None:
        if rng.random() < 0.3:
            k.after(60, lambda: arrive(i), label=f"retry-{i}")

    for i in range(50):
        k.schedule(
            T0 + timedelta(seconds=int(rng.integers(0, 86400))),
            lambda i=i: arrive(i),
            label=f"arrive-{i}",
        )
    k.run()
    return k.log


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_the_same_seed_gives_the_same_event_log(seed: int) -> None:
    first, second = _story(seed), _story(seed)
    assert first == second
    assert first == sorted(first)  # the log is in (time, priority, seq) order…
    assert len({seq for _, _, seq, _ in first}) == len(first)


def test_different_seeds_give_different_stories() -> None:
    assert _story(1) != _story(2)


def test_sim_clock_is_a_clock_that_runs_events_while_it_sleeps() -> None:
    k = Kernel(T0)
    clock: Clock = SimClock(k)
    seen: list[datetime] = []
    k.after(30, lambda: seen.append(clock.now()), label="half-minute")
    k.after(90, lambda: seen.append(clock.now()), label="minute-and-a-half")
    clock.sleep(60)
    assert seen == [T0 + timedelta(seconds=30)]
    assert clock.now() == T0 + timedelta(seconds=60)
    clock.sleep(60)
    assert seen[-1] == T0 + timedelta(seconds=90)
    assert clock.now() == T0 + timedelta(seconds=120)
