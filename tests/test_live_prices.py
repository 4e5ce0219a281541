"""Live prices in the service (``catalog/live.py``): quotes become each offering's price points
in the store; engines' backends plan and bill with them, cut where they change; an old price is
used but marked stale and warned about; the refresher survives a feed going down."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from budgeteer.backends.market import CatalogPrices
from budgeteer.catalog.live import PriceRefresher, StorePrices, points_for
from budgeteer.catalog.quotes import FeedError, Quote
from budgeteer.clock import ManualClock
from budgeteer.config import load_config
from budgeteer.domain.offering import Market
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.store import MemoryStore, PricePoint
from builders import make_offering

T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)
SPOT_2Z = dataclasses.replace(
    make_offering("aws/us-east-1/use1-az1+use1-az4/p3.2xlarge/spot", market=Market.SPOT, price=0.9),
    instance_type="p3.2xlarge",
    zones=("use1-az1", "use1-az4"),
)
OD = dataclasses.replace(
    make_offering("aws/us-east-1/*/p3.2xlarge/on_demand", price=3.06), instance_type="p3.2xlarge"
)
AZ = dataclasses.replace(
    make_offering("azure/eastus/*/NC6/on_demand", provider="azure", region="eastus", price=1.0),
    instance_type="NC6",
)


def _quote(zone: str, market: Market, usd: str, source: str = "s") -> Quote:
    return Quote("aws", "us-east-1", zone, "p3.2xlarge", market, Decimal(usd), source, T0)


def test_an_offering_takes_its_zones_highest_quote_else_its_regions() -> None:
    quotes = [
        _quote("use1-az1", Market.SPOT, "0.91", "aws-spot-history:use1-az1"),
        _quote("use1-az4", Market.SPOT, "1.02", "aws-spot-history:use1-az4"),
        _quote("use1-az6", Market.SPOT, "5.00"),  # not one of its zones
        _quote("", Market.ON_DEMAND, "3.06", "aws-pricing:SKU1"),
    ]
    points = {p.offering_id: p for p in points_for([SPOT_2Z, OD, AZ], quotes, T0)}
    assert points[SPOT_2Z.id].usd_per_hour == Decimal("1.02")
    assert points[SPOT_2Z.id].source == "aws-spot-history:use1-az4"
    assert points[OD.id] == PricePoint(OD.id, T0, Decimal("3.06"), "aws-pricing:SKU1")
    assert AZ.id not in points  # no quote: keeps the catalog's


class _Engine(CatalogPrices):
    """An engine's pricing half (Slurm, Ray, EC2, Kubernetes share it)."""


def _live(store: MemoryStore, clock: ManualClock, hours: float = 6) -> StorePrices:
    return StorePrices(store, clock, timedelta(hours=hours), reread_seconds=0)


def test_engines_plan_and_bill_with_live_prices_cut_where_they_change() -> None:
    store, clock = MemoryStore(), ManualClock(T0 + timedelta(hours=1))
    store.add_prices(
        [
            PricePoint(SPOT_2Z.id, T0, Decimal("0.95"), "feed:a"),
            PricePoint(SPOT_2Z.id, T0 + timedelta(hours=2), Decimal("1.10"), "feed:b"),
        ]
    )
    engine = _Engine()
    assert engine.price(SPOT_2Z, T0) == (Decimal(repr(0.9)), SPOT_2Z.price.source)  # catalog
    engine.live_prices = _live(store, clock)
    assert engine.price(SPOT_2Z, T0 + timedelta(hours=1)) == (Decimal("0.95"), "feed:a")
    assert engine.price(OD, T0) == (Decimal(repr(3.06)), OD.price.source)  # no live price
    segments = engine.price_segments(SPOT_2Z, T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    assert segments == [
        (T0 + timedelta(hours=1), T0 + timedelta(hours=2), Decimal("0.95"), "feed:a"),
        (T0 + timedelta(hours=2), T0 + timedelta(hours=3), Decimal("1.10"), "feed:b"),
    ]
    # an hour billed across the change costs exactly the two pieces
    billed = sum(
        (p * Decimal((b - a).total_seconds()) / 3600 for a, b, p, _ in segments), Decimal(0)
    )
    assert billed == Decimal("2.05")


def test_an_old_price_is_used_but_marked_stale_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, clock = MemoryStore(), ManualClock(T0)
    store.add_prices([PricePoint(OD.id, T0, Decimal("2.90"), "aws-pricing:SKU1")])
    live = _live(store, clock, hours=6)
    assert live.price(OD, T0 + timedelta(hours=5)) == (Decimal("2.90"), "aws-pricing:SKU1")
    with caplog.at_level(logging.WARNING):
        price, source = live.price(OD, T0 + timedelta(hours=7))
        live.price(OD, T0 + timedelta(hours=8))
    assert price == Decimal("2.90")  # the last known, not the catalog's
    assert "stale since 2026-12-03 18:00" in source
    warnings = [r for r in caplog.records if "is 7.0 h old" in r.getMessage()]
    assert len(warnings) == 1


def test_the_refresher_keeps_prices_and_survives_a_feed_going_down() -> None:
    store, clock = MemoryStore(), ManualClock(T0)
    answers: list[Any] = [
        [_quote("", Market.ON_DEMAND, "3.00")],
        FeedError("aws-pricing", "get_products", "Throttling: rate exceeded"),
        [_quote("", Market.ON_DEMAND, "3.10")],
    ]
    refreshed: list[int] = []

    def fetch(now: datetime) -> list[Quote]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return [dataclasses.replace(q, observed_at=now) for q in answer]

    r = PriceRefresher(
        store, [OD, SPOT_2Z], fetch, clock, 3600, on_refresh=lambda: refreshed.append(1)
    )
    assert r.refresh_once() == 1
    clock.advance(3600)
    assert r.refresh_once() == 0  # the feed failed: nothing lost, nothing written
    clock.advance(3600)
    assert r.refresh_once() == 1
    assert (r.rounds, r.failures, len(refreshed)) == (2, 1, 2)
    points = store.price_points(OD.id)
    assert [p.usd_per_hour for p in points] == [Decimal("3.00"), Decimal("3.10")]
    assert [p.at for p in points] == [T0, T0 + timedelta(hours=2)]
    # what is in force an hour in: the first point (the one at `since`) and what follows
    assert [p.usd_per_hour for p in store.price_points(OD.id, since=T0 + timedelta(hours=1))] == [
        Decimal("3.00"),
        Decimal("3.10"),
    ]


def test_offerings_show_the_live_price_its_age_and_staleness(tmp_path: Path) -> None:
    from api_world import ADMIN, CATALOG, make_world  # noqa: PLC0415

    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path)
    try:
        now = w.clock.now()
        offering = next(o for o in CATALOG.offerings if o.market is Market.SPOT)
        other = next(o for o in CATALOG.offerings if o.market is Market.ON_DEMAND)
        w.store.add_prices(
            [
                PricePoint(offering.id, now - timedelta(hours=1), Decimal("0.5"), "feed:fresh"),
                PricePoint(other.id, now - timedelta(hours=9), Decimal("7.25"), "feed:old"),
            ]
        )
        rows = w.http.get("/v1/offerings?limit=5000", headers=w.auth(ADMIN)).json()["offerings"]
        by = {r["id"]: r for r in rows}
        fresh, old = by[offering.id], by[other.id]
        assert (fresh["usd_per_hour"], fresh["price_source"], fresh["price_stale"]) == (
            "0.5",
            "feed:fresh",
            False,
        )
        assert fresh["price_age_seconds"] == 3600
        assert fresh["catalog_usd_per_hour"] == str(offering.usd_per_hour)
        assert (old["usd_per_hour"], old["price_stale"]) == ("7.25", True)  # older than 6 h
    finally:
        w.store.close()


# -- config ------------------------------------------------------------------------------------
def _cfg(tmp_path: Path, prices: Any, backend: Any = None) -> Path:
    doc: dict[str, Any] = {"store": "sqlite:///state.db", "prices": prices}
    if backend is not None:
        doc["backend"] = backend
    path = tmp_path / "budgeteer.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("prices", "field"),
    [
        ({"providers": []}, "prices.providers"),
        ({"providers": ["oracle"]}, "prices.providers[0]"),
        ({"providers": ["aws"], "refresh_seconds": 5}, "prices.refresh_seconds"),
        ({"providers": ["aws"], "max_age_seconds": 0}, "prices.max_age_seconds"),
        ({"providers": ["azure"], "azure_url": "ftp://x"}, "prices.azure_url"),
    ],
)
def test_bad_price_configs_are_refused_by_field(tmp_path: Path, prices: Any, field: str) -> None:
    with pytest.raises(SpecErrors) as err:
        load_config(_cfg(tmp_path, prices))
    assert field in {e.field for e in err.value.errors}


def test_an_engine_with_a_prices_config_plans_with_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgeteer.service.wiring import build  # noqa: PLC0415

    backend = {
        "kind": "ec2",
        "region": "us-east-1",
        "bucket": "b-bucket",
        "images": {"*": "ami-0123456789abcdef0"},
    }
    cfg, root = load_config(_cfg(tmp_path, {"providers": ["aws", "gcp"]}, backend))
    svc = build(cfg, root)
    monkeypatch.delenv("GCP_API_KEY", raising=False)
    with pytest.raises(SpecError) as err:
        svc.refresher(svc.catalog.offerings)
    assert err.value.field == "prices.gcp_api_key_env"
    sched = svc.scheduler()
    assert isinstance(sched.backend, CatalogPrices)
    assert sched.backend.live_prices is svc.store_prices()
    offering = sched.catalog.offerings[0]
    svc.store.add_prices(
        [
            PricePoint(
                offering.id, svc.clock.now() - timedelta(minutes=5), Decimal("0.123"), "feed:x"
            )
        ]
    )
    svc.store_prices().refreshed()
    planned = {o.id: o for o in sched.snapshots.prices(svc.clock.now())}
    assert planned[offering.id].usd_per_hour == pytest.approx(0.123)
    assert planned[offering.id].price.source == "feed:x"
