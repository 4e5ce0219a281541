"""A pool's record read back from attempts and the ledger (``ledger/pools.py``, the dashboard's
"Pools" section): its size over a window, warm starts by instance id, idle time and cost — a
window cutting an idle stretch counts its share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from budgeteer.ledger.billing import IDLE_SOURCE
from budgeteer.ledger.pools import pool_history
from budgeteer.store.base import Attempt, LedgerEntry
from budgeteer.store.records import PoolCharge

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def attempt(
    aid: int, start: float, end: float | None, ids: tuple[str, ...], offering: str = "t4"
) -> Attempt:
    return Attempt(
        aid,
        f"j{aid}",
        1,
        "sandbox",
        offering,
        "on_demand",
        ids,
        at(start),
        None if end is None else at(end),
        instances=len(ids),
    )


def idle(aid: int, start: float, end: float, usd: str, instances: int = 1) -> LedgerEntry:
    return LedgerEntry(
        aid,
        f"j{aid}",
        at(start),
        at(end),
        Decimal("6"),
        Decimal(usd),
        f"{IDLE_SOURCE}catalog",
        instances,
    )


def test_sizes_warm_starts_and_idle_over_a_window() -> None:
    attempts = [
        attempt(1, 0, 10, ("i-1",)),  # boots i-1
        attempt(2, 10, 20, ("i-1",)),  # i-1 again, at once: a warm start
        attempt(3, 5, 15, ("i-2",)),  # boots i-2 beside it
        attempt(4, 30, None, ("i-2",)),  # i-2 after idling 15 minutes, still running
        attempt(5, 0, 60, ("x-1",), offering="other"),  # another offering: not this pool's
    ]
    ledger = [
        idle(3, 15, 30, "1.50"),  # i-2 idle between 3 and 4
        idle(2, 20, 40, "2.00"),  # i-1 idle after 2, then given back
        LedgerEntry(1, "j1", at(0), at(10), Decimal("6"), Decimal("1.00"), "catalog"),
    ]
    h = pool_history(["t4"], attempts, ledger, at(0), at(50))["t4"]
    assert (h.launches, h.warm_starts) == (4, 2)
    assert [(s[0], s[1], s[2]) for s in h.steps] == [
        (at(0), 1, 0),
        (at(5), 2, 0),
        (at(15), 1, 1),  # 3 ended, i-2 idles
        (at(20), 0, 2),  # 2 ended, i-1 idles too
        (at(30), 1, 1),  # 4 took i-2
        (at(40), 1, 0),  # i-1 given back
    ]
    assert h.idle_hours == Decimal("0.5833")  # 15 + 20 minutes
    assert h.idle_usd == Decimal("3.50")
    # a window from minute 25: the idle stretches' shares, the earlier launches not counted
    late = pool_history(["t4"], attempts, ledger, at(25), at(50))["t4"]
    assert (late.launches, late.warm_starts) == (1, 1)
    assert late.steps[0] == (at(25), 0, 2)  # what was held when the window opened
    assert late.idle_usd == Decimal("2.00")  # 5 of 15 min of 1.50 + 15 of 20 min of 2.00
    assert late.idle_hours == Decimal("0.3333")


def test_an_empty_pool_is_flat() -> None:
    h = pool_history(["t4"], [], [], at(0), at(60))["t4"]
    assert h.steps == ((at(0), 0, 0),)
    assert (h.launches, h.warm_starts, h.idle_usd) == (0, 0, Decimal("0.00"))


def test_instances_a_pool_booted_count_as_idle_until_a_job_takes_them() -> None:
    """Two instances booted for a warm window at minute 0 (charged to the team), one taken by
    a job at 10; the other given back at 30."""
    charges = [
        PoolCharge(
            "t4", "ml", at(0), at(10), Decimal("6"), Decimal("2.00"), "idle", ("b-1", "b-2")
        ),
        PoolCharge("t4", "ml", at(10), at(30), Decimal("6"), Decimal("2.00"), "idle", ("b-2",)),
        PoolCharge("other", "ml", at(0), at(60), Decimal("6"), Decimal("6.00"), "idle", ("x",)),
    ]
    attempts = [attempt(1, 10, 20, ("b-1",))]
    h = pool_history(["t4"], attempts, [], at(0), at(60), charges)["t4"]
    assert [s[1:] for s in h.steps] == [(0, 2), (1, 1), (0, 1), (0, 0)]
    assert [s[0] for s in h.steps] == [at(0), at(10), at(20), at(30)]
    assert h.idle_usd == Decimal("4.00")
    assert h.idle_hours == Decimal("0.6667")  # 2 × 10 min + 20 min
    assert (h.launches, h.warm_starts) == (1, 1)  # b-1 was booted: no boot for the job
