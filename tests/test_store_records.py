"""The store contract, continued: the service's records beside jobs — spot market histories,
learned speeds, live price points, retraining signals and the spot decider's moves — over
every store (memory, SQLite, PostgreSQL: the ``store`` fixture)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from budgeteer.core.speed import Speed
from budgeteer.core.spot.decide import Situation
from budgeteer.core.spot.estimate import MarketHistory, Period
from budgeteer.core.spot.replay import Mode
from budgeteer.store import PricePoint, SignalRecord, SpotDecisionRecord, SqlStore, Store, schema
from budgeteer.store.sql_support import situation_from_json, situation_json
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


def test_spot_decisions_are_kept_newest_first_with_every_number(store: Store) -> None:
    assert store.spot_decisions() == []
    # awkward floats on purpose: they must come back exactly (explain and the tests decide
    # again from them)
    wait = Situation(
        work_hours=4.1,
        deadline_hours=6.0 + 1e-12,
        changeover_hours=0.2,
        spot_usd_per_hour=0.9731,
        on_demand_usd_per_hour=3.06,
        elapsed_hours=1 / 3,
        done_hours=0.1,
        mode=Mode.IDLE,
        changeover_left_hours=0.0,
        spot_up=False,
        spot_age_hours=0.25,
        tick_hours=1 / 60,
    )
    first = SpotDecisionRecord(
        "churn-1",
        None,
        NOW,
        "take_on_demand",
        "aws/az1/p3/spot",
        Mode.ON_DEMAND,
        wait,
        "; safety net: the slack is below a changeover and a tick",
    )
    back = dataclasses.replace(wait, mode=Mode.ON_DEMAND, spot_up=True, last_uptime_hours=1 / 7)
    second = SpotDecisionRecord(
        "churn-1", 7, NOW + timedelta(hours=1), "to_spot", "aws/az1/p3/spot", Mode.SPOT, back
    )
    other = SpotDecisionRecord(
        "ltv-2", 9, NOW + timedelta(hours=2), "bridge_on_demand", "gcp/a/spot", Mode.IDLE, wait
    )
    ids = [store.add_spot_decision(r) for r in (first, second, other)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    kept = store.spot_decisions()
    assert [r.action for r in kept] == ["bridge_on_demand", "to_spot", "take_on_demand"]
    assert kept[2] == dataclasses.replace(first, id=ids[0])
    assert kept[2].situation.elapsed_hours == 1 / 3  # exactly
    assert kept[1].attempt_id == 7
    assert kept[1].situation.mode is Mode.ON_DEMAND
    assert kept[1].situation.last_uptime_hours == 1 / 7  # exactly
    assert store.spot_decisions("churn-1") == kept[1:]
    assert store.spot_decisions("churn-1", limit=1) == [kept[1]]
    assert store.spot_decisions("nobody") == []
    assert kept[0].at == NOW + timedelta(hours=2)  # times keep their zone


def test_a_situation_kept_before_the_last_uptime_was_read_loads_without_it() -> None:
    now = Situation(
        4.0, 6.0, 0.2, 0.9, 3.06, 0.5, 0.25, Mode.ON_DEMAND, 0.0, True, 0.1, 1 / 60, 0.1
    )
    text = situation_json(now)
    assert situation_from_json(text) == now
    old = text.replace(', "last_uptime_hours": 0.1', "")  # a row written by session 29's code
    assert "last_uptime_hours" not in old
    assert situation_from_json(old) == dataclasses.replace(now, last_uptime_hours=None)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_migrations_build_exactly_the_schema_the_store_is_written_against(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``store/schema.py`` (what the SQL store queries) and the Alembic migrations (what
    builds a database) are written by hand, side by side: a column or index in one and not in
    the other would pass every other test on a fresh database and fail on a migrated one."""
    url = (
        f"sqlite:///{tmp_path / 'budgeteer.db'}"
        if kind == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    store = SqlStore(url)
    try:
        with store.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), schema.metadata)
    finally:
        store.close()
    assert diff == []
