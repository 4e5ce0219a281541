"""Pool sizing (issue 18, its first piece: the pure rule): bursts booted ahead, scale to zero
after the idle timeout, the maximum respected, the minimum kept warm; bad settings named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgeteer.core.pools import (
    Demand,
    PoolError,
    PoolSettings,
    PoolState,
    WarmWindow,
    size_pool,
)

NOW = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("settings", "state", "demand", "target", "boot", "released"),
    [
        # nothing at all: stays at zero
        (PoolSettings("t4"), PoolState(), Demand(), 0, 0, 0),
        # two jobs placed now, nothing held: boot two
        (PoolSettings("t4"), PoolState(), Demand(now=2), 2, 2, 0),
        # one idle instance serves the one job placed now: no boot, nothing released
        (PoolSettings("t4"), PoolState(idle_since=(ago(3),)), Demand(now=1), 1, 0, 0),
        # a burst of 5 at 01:01 (within the 2-minute start-up): booted ahead
        (PoolSettings("t4"), PoolState(), Demand(soon=((NOW + timedelta(minutes=1), 5),)), 5, 5, 0),
        # a burst beyond the lead: not yet
        (
            PoolSettings("t4"),
            PoolState(),
            Demand(soon=((NOW + timedelta(minutes=30), 5),)),
            0,
            0,
            0,
        ),
        # scale to zero: idle past the 10-minute timeout, nothing planned
        (PoolSettings("t4"), PoolState(idle_since=(ago(11), ago(12))), Demand(), 0, 0, 2),
        # idle, but not for long enough: kept
        (PoolSettings("t4"), PoolState(idle_since=(ago(5), ago(11))), Demand(), 0, 0, 1),
        # the minimum stays warm whatever the idle time
        (
            PoolSettings("t4", minimum=1, team="ml"),
            PoolState(idle_since=(ago(60), ago(90))),
            Demand(),
            1,
            0,
            1,
        ),
        (PoolSettings("t4", minimum=2, team="ml"), PoolState(), Demand(), 2, 2, 0),
        # the maximum caps the target and the boots
        (PoolSettings("t4", maximum=3), PoolState(busy=2), Demand(now=4), 3, 1, 0),
        # above the maximum (settings lowered): idle ones go at once, timeout or not
        (
            PoolSettings("t4", maximum=1),
            PoolState(busy=1, idle_since=(ago(1), ago(2))),
            Demand(),
            1,
            0,
            2,
        ),
    ],
)
def test_pool_sizing_table(
    settings: PoolSettings,
    state: PoolState,
    demand: Demand,
    target: int,
    boot: int,
    released: int,
) -> None:
    plan = size_pool(settings, state, demand, NOW)
    assert (plan.target, plan.boot, len(plan.release)) == (target, boot, released), plan.reason


#: 4 instances from 02:00 for an hour (a nightly burst); a 2-minute start-up
NIGHTLY = PoolSettings(
    "t4", team="ml", startup_seconds=120.0, warm=(WarmWindow("0 2 * * *", 4, 3600.0),)
)
AT_2 = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "state", "target", "boot", "released"),
    [
        # half an hour before: nothing kept, nothing booted
        (AT_2 - timedelta(minutes=30), PoolState(), 0, 0, 0),
        # one start-up (2 min) ahead: booted now, so they are ready at 02:00
        (AT_2 - timedelta(minutes=2), PoolState(), 4, 4, 0),
        (AT_2 - timedelta(minutes=1), PoolState(idle_since=(AT_2,) * 4), 4, 0, 0),
        # inside the window: kept however long they idle; one job busy counts toward it
        (AT_2 + timedelta(minutes=40), PoolState(busy=1, idle_since=(AT_2,) * 3), 4, 0, 0),
        (AT_2 + timedelta(minutes=40), PoolState(busy=2, idle_since=(AT_2,) * 1), 4, 1, 0),
        # the window closed at 03:00: past their idle timeout, all given back (scale to zero)
        (AT_2 + timedelta(minutes=61), PoolState(idle_since=(AT_2,) * 4), 0, 0, 4),
        # the next night, again
        (AT_2 + timedelta(days=1, minutes=-1), PoolState(), 4, 4, 0),
    ],
)
def test_a_warm_window_boots_ahead_keeps_and_lets_go(
    now: datetime, state: PoolState, target: int, boot: int, released: int
) -> None:
    plan = size_pool(NIGHTLY, state, Demand(), now)
    assert (plan.target, plan.boot, len(plan.release)) == (target, boot, released), plan.reason
    assert ("warm window" in plan.reason) == (target == 4)


def test_a_window_raises_the_floor_above_min_and_never_lowers_it() -> None:
    both = PoolSettings("t4", minimum=2, team="ml", warm=(WarmWindow("0 2 * * *", 1, 3600.0),))
    assert both.floor(AT_2) == 2  # a smaller window does not lower min
    assert NIGHTLY.floor(AT_2 + timedelta(minutes=59)) == 4
    assert NIGHTLY.floor(AT_2 + timedelta(minutes=60)) == 0  # [02:00, 03:00)


def test_the_next_floor_change_is_a_boot_or_a_window_end() -> None:
    assert PoolSettings("t4", minimum=1, team="ml").next_floor_change(AT_2) is None
    boot = AT_2 - timedelta(minutes=2)
    assert NIGHTLY.next_floor_change(AT_2 - timedelta(hours=5)) == boot
    assert NIGHTLY.next_floor_change(boot) == AT_2 + timedelta(hours=1)  # open: its end
    assert NIGHTLY.next_floor_change(AT_2 + timedelta(hours=1)) == boot + timedelta(days=1)
    # the floor does change there, and nowhere between
    assert NIGHTLY.floor(boot - timedelta(seconds=1)) == 0
    assert NIGHTLY.floor(boot) == 4
    assert NIGHTLY.floor(AT_2 + timedelta(minutes=59, seconds=59)) == 4


def test_the_longest_idle_go_first() -> None:
    plan = size_pool(
        PoolSettings("t4", idle_timeout_seconds=0),
        PoolState(idle_since=(ago(1), ago(30), ago(10))),
        Demand(now=1),
        NOW,
    )
    assert plan.release == (ago(30), ago(10))


@given(
    minimum=st.integers(0, 4),
    extra=st.integers(0, 6),
    busy=st.integers(0, 8),
    idle=st.lists(st.floats(0, 120), max_size=8),
    now_wanted=st.integers(0, 8),
)
def test_sizing_never_breaks_its_bounds(
    minimum: int, extra: int, busy: int, idle: list[float], now_wanted: int
) -> None:
    settings = PoolSettings("p", minimum=minimum, maximum=max(minimum, 1) + extra, team="ml")
    state = PoolState(busy=busy, idle_since=tuple(ago(m) for m in idle))
    plan = size_pool(settings, state, Demand(now=now_wanted), NOW)
    assert settings.maximum is not None
    assert minimum <= plan.target <= settings.maximum
    after = state.size + plan.boot - len(plan.release)
    assert after >= plan.target  # never below what is needed
    assert len(plan.release) <= len(state.idle_since)  # only idle instances are given back
    assert plan.boot == 0 or not plan.release  # never boot and release in one cycle


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"minimum": 3, "maximum": 2}, "pools.p.max"),
        ({"minimum": -1}, "pools.p.min"),
        ({"maximum": 0}, "pools.p.max"),
        ({"idle_timeout_seconds": -5.0}, "pools.p.idle_timeout"),
        ({"idle_timeout_seconds": float("nan")}, "pools.p.idle_timeout"),
        ({"startup_seconds": -1.0}, "pools.p.startup_seconds"),
        ({"minimum": 1}, "pools.p.team: required with min"),
        ({"warm": (WarmWindow("0 2 * * *", 1, 3600.0),)}, "pools.p.team: required with warm"),
        ({"team": "ml", "warm": (WarmWindow("0 2 * *", 1, 3600.0),)}, r"pools.p.warm\[0\].at"),
        (
            {"team": "ml", "maximum": 2, "warm": (WarmWindow("0 2 * * *", 3, 3600.0),)},
            r"pools.p.warm\[0\].instances: must be ≥ 1 and ≤ max \(2\)",
        ),
        ({"team": "ml", "warm": (WarmWindow("0 2 * * *", 1, 0.0),)}, r"pools.p.warm\[0\].for"),
    ],
)
def test_bad_settings_are_named(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(PoolError, match=field):
        PoolSettings("p", **kwargs)  # type: ignore[arg-type]
