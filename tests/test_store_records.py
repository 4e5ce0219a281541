"""The store contract, continued: the service's records beside jobs — spot market histories,
learned speeds, live price points and retraining signals — over every store (memory, SQLite,
PostgreSQL: the ``store`` fixture)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal

import pytest

from budgeteer.core.speed import Speed
from budgeteer.core.spot.estimate import MarketHistory, Period
from budgeteer.store import PricePoint, SignalRecord, Store
from builders import NOW


def test_market_histories_round_trip_and_replace(store: Store) -> None:
    assert store.markets() == []
    seen = (
        MarketHistory("aws/az1/p3/spot")
        .observe(False, NOW)
        .observe(True, NOW + timedelta(minutes=50))
        .observe(False, NOW + timedelta(hours=3, minutes=50))
    )
    never = MarketHistory("gcp/a/a100/spot")
    store.put_market(seen)
    store.put_market(never)
    assert store.markets() == [seen, never]
    assert store.markets()[0].periods == (Period(False, 50 / 60, False), Period(True, 3.0, True))
    later = seen.observe(True, NOW + timedelta(hours=4))
    store.put_market(later)  # replaces: one per offering
    assert store.markets() == [later, never]
    assert store.markets()[0].since == NOW + timedelta(hours=4)  # times keep their zone


def test_learned_speeds_round_trip_and_replace(store: Store) -> None:
    assert store.speeds() == []
    slow = Speed("churn", "A10G").observe(0.5)
    fast = Speed("churn", "A100").observe(1.2).observe(1.3)
    other = Speed("ltv", "A10G", 0.9, 4)
    for s in (other, slow, fast):
        store.put_speed(s)
    assert store.speeds() == [fast, slow, other]  # by family, then accelerator
    again = slow.observe(0.5)
    store.put_speed(again)  # replaces: one per family and accelerator
    assert store.speeds() == [fast, again, other]
    assert store.speeds()[1].runs == 2
    assert store.speeds()[1].factor == pytest.approx(2 / 3)


def test_price_points_append_exactly_skip_repeats_and_read_from_a_time(store: Store) -> None:
    assert store.price_points() == []
    a = PricePoint("aws/od", NOW, Decimal("3.06000001"), "aws-pricing:SKU1")
    b = PricePoint("aws/od", NOW + timedelta(hours=1), Decimal("2.9"), "aws-pricing:SKU1")
    c = PricePoint("gcp/od", NOW, Decimal("3.673385"), "gcp-billing:A+B+C")
    assert store.add_prices([b, a, c]) == 3
    assert store.add_prices([a]) == 0  # the same offering and time: kept once
    assert store.price_points() == [a, b, c]
    assert store.price_points("aws/od")[0].usd_per_hour == Decimal("3.06000001")  # exact
    assert store.price_points("aws/od", since=NOW + timedelta(minutes=30)) == [a, b]
    assert store.price_points("aws/od", since=NOW + timedelta(hours=2)) == [b]
    assert store.price_points("nope") == []
    assert store.price_points()[0].at == NOW  # times keep their zone


def test_signals_are_kept_newest_first_with_their_statistics(store: Store) -> None:
    assert store.signals() == []
    first = SignalRecord(
        "churn",
        "growth",
        "drift",
        "critical",
        "submit",
        "churn-1",
        NOW,
        "critical drift",
        (("tenure", 1.5, 0.5, 0.4), ("plan", 0.6, None, 0.3)),
    )
    second = SignalRecord(
        "ltv", "growth", "degradation", "none", "none", None, NOW + timedelta(hours=1), "quiet"
    )
    a, b = store.add_signal(first), store.add_signal(second)
    assert b > a
    kept = store.signals()
    assert [r.model for r in kept] == ["ltv", "churn"]
    assert kept[1] == dataclasses.replace(first, id=a)
    assert kept[1].statistics[1][2] is None  # a categorical feature has no KS
    assert store.signals("churn") == [kept[1]]
    assert store.signals(limit=1) == [kept[0]]
    assert kept[0].at == NOW + timedelta(hours=1)
